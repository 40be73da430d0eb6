"""Compute budgets (issue 46): the FLOP count by hand and by torch's FlopCounterMode on the default model,
the three parameter counts, and trainer.flops giving the steps it says."""

import json
import logging

import torch
from torch.utils.flop_counter import FlopCounterMode

from src.model import build_model
from src.training.flops import budget, parameter_counts, training_flops_per_token
from tests.helpers import train_in_process


def test_flops_per_token_of_a_one_layer_gpt_by_hand():
    # vocab 5, d 8, 1 layer, MLP ratio 4, tied weights, window 6.
    model = build_model(dict(kind="gpt", context_window=6, embedding_dim=8, num_heads=2, num_layers=1), 5)
    N = 4 * 8 * 8 + 2 * 8 * 32 + 8 * 5  # W_Q, W_K, W_V, W_O; W_1, W_2; E as the tied LM head
    attention = 2 * 8 * 6 + 2 * 8 * 6  # Q K^T and the weighted V: 2 d T each, forward
    assert training_flops_per_token(model, 6) == 6 * N + 3 * attention == 6 * 808 + 576 == 5424


def test_the_default_model_against_torch_flop_counter():
    """FlopCounterMode counts matmuls (mm, addmm, bmm) and the fused attention (scaled_dot_product_*),
    forward and backward; norms, GELU, softmax outside the kernel and the loss are not matmuls and are in
    neither count. On the meta device: no memory, no time."""
    B, vocab = 2, 65
    with torch.device("meta"):
        model = build_model(dict(kind="gpt"), vocab)  # 4 layers, d 120, 4 heads, T 64
        idx = torch.randint(0, vocab, (B, 64))
    counter = FlopCounterMode(display=False)
    with counter:
        model(idx, idx)[1].backward()
    assert counter.get_total_flops() == B * 64 * training_flops_per_token(model, 64)
    assert training_flops_per_token(model, 64) == 6 * (4 * 12 * 120**2 + 65 * 120) + 12 * 4 * 120 * 64


def test_the_three_parameter_counts_by_hand():
    model = build_model(dict(kind="gpt", context_window=6, embedding_dim=8, num_heads=2, num_layers=1), 5)
    blocks = 4 * 8 * 8 + 2 * 8 * 32 + 2 * 8  # the matrices and the two norms' gains
    assert parameter_counts(model) == {"all": 5 * 8 + blocks + 8, "non_embedding": blocks + 8, "transformer": blocks}
    untied = dict(kind="gpt", context_window=6, embedding_dim=8, num_heads=2, num_layers=1, tie_weights=False)
    assert parameter_counts(build_model({**untied, "positional": "learned"}, 5)) == {
        "all": 5 * 8 + 6 * 8 + blocks + 8 + 8 * 5,  # E, the position table, blocks, ln_f, W_vocab
        "non_embedding": blocks + 8 + 8 * 5,
        "transformer": blocks,
    }
    seed = build_model(dict(kind="seed", context_window=6, embedding_dim=8, num_heads=2), 5)
    assert parameter_counts(seed) == {"all": 40 + 16 + 256 + 45, "non_embedding": 16 + 256 + 45, "transformer": 272}


def test_a_budget_past_four_epochs_warns():
    assert not any(
        line.startswith("warning")
        for line in budget(4e9, 100, 1000, 10**7).lines(dict.fromkeys(("all", "non_embedding", "transformer"), 10))
    )
    lines = budget(5e9, 100, 1000, 10**7).lines(dict.fromkeys(("all", "non_embedding", "transformer"), 10))
    assert "5.00 epochs of the train split (10,000,000 tokens)" in lines[0]
    assert lines[-1].startswith("warning: trainer.flops=5e+09 means 5.0 epochs") and "Muennighoff" in lines[-1]


def test_a_budget_trains_the_steps_it_says(tmp_path, caplog):
    """tiny_training's model: vocab 65, d 32, 2 layers, T 16, batch 8; 7.5 steps' FLOPs buy 7 steps."""
    N = 2 * (4 * 32 * 32 + 2 * 32 * 128) + 32 * 65
    per_step = 8 * 16 * (6 * N + 12 * 2 * 32 * 16)
    caplog.set_level(logging.INFO, logger="src")
    train_in_process(
        tmp_path / "run", f"trainer.flops={7.5 * per_step}", "trainer.max_steps=1000", "data.val_tokens=2000"
    )
    result = json.loads((tmp_path / "run" / "result.json").read_text())
    assert result["steps"] == 7 and result["tokens"] == 7 * 8 * 16 and result["flops"] == 7 * per_step
    assert [step for step, _ in result["val_curve"]] == [0, 7]  # step 0's validation and the last: src.compare's
    said = "\n".join(r.getMessage() for r in caplog.records)
    assert f"trainer.flops={7.5 * per_step:.3g}: 7 steps (trainer.max_steps) of 128 tokens" in said
    assert f"parameters: {result['parameter_counts']['all']:,} all" in said


def test_a_budget_raised_on_resume_trains_on_to_its_steps(tmp_path):
    """A resumed run is checked against the budget's steps, not trainer.max_steps (a sweep job resumed)."""
    N = 2 * (4 * 32 * 32 + 2 * 32 * 128) + 32 * 65
    per_step = 8 * 16 * (6 * N + 12 * 2 * 32 * 16)
    run, fast = tmp_path / "run", ("data.val_tokens=2000", "trainer.num_sanity_val_steps=0")
    train_in_process(run, f"trainer.flops={4.5 * per_step}", *fast)
    train_in_process(run, f"trainer.flops={9.5 * per_step}", "trainer.max_steps=3", "ckpt_path=last", *fast)
    assert json.loads((run / "result.json").read_text())["steps"] == 9
