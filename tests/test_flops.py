"""FLOPs per token against a hand count and against PyTorch's FLOP counter; the MFU callback's numbers."""

import csv
import types

import lightning as L
import pytest
import torch
from lightning.fabric.utilities.throughput import measure_flops
from torch.utils.data import DataLoader, TensorDataset

from src.model import build_model
from src.training import callbacks
from src.training.flops import Throughput, compute_dtype, matmul_weights, peak_flops, training_flops_per_token
from src.training.lit_gpt import LitGPT
from tests.helpers import scalars


def test_flops_per_token_of_a_small_gpt_by_hand():
    # vocab 11, d 16, 2 layers, MLP ratio 4, tied weights, window 12.
    model = build_model(dict(kind="gpt", context_window=12, embedding_dim=16, num_heads=4, num_layers=2), 11)
    per_layer = 4 * 16 * 16 + 2 * 16 * 64  # W_Q, W_K, W_V, W_O; W_1, W_2
    N = 2 * per_layer + 16 * 11  # + E as the LM head (its lookup costs nothing)
    assert matmul_weights(model) == N == 6320
    assert training_flops_per_token(model, 12) == 6 * N + 12 * 2 * 16 * 12 == 42_528


def test_flops_per_token_of_seed_gpt_by_hand():
    # vocab 11, d 12, one attention layer with W_O, W_out of 12 x 11; E is only looked up.
    model = build_model(dict(kind="seed", context_window=8, embedding_dim=12, num_heads=3), 11)
    N = 4 * 12 * 12 + 12 * 11
    assert matmul_weights(model) == N
    assert training_flops_per_token(model, 8) == 6 * N + 12 * 12 * 8


@pytest.mark.parametrize(
    "config",
    [
        dict(kind="gpt", context_window=12, embedding_dim=16, num_heads=4, num_layers=2, fused=False),
        dict(kind="gpt", context_window=12, embedding_dim=16, num_heads=4, num_layers=2, fused=True),
        dict(kind="gpt", context_window=10, embedding_dim=16, num_heads=2, num_layers=3, tie_weights=False, bias=True),
        dict(kind="gpt", context_window=12, embedding_dim=16, num_heads=4, num_layers=2, positional="learned"),
        dict(kind="seed", context_window=8, embedding_dim=12, num_heads=3, output_projection=False),
    ],
)
def test_the_formula_equals_torch_flop_counter_on_the_meta_device(config):
    """Every matmul of forward + backward, counted by torch's FlopCounterMode without running anything."""
    B, T = 3, config["context_window"]
    with torch.device("meta"):
        model = build_model(config, 11)
        idx = torch.randint(0, 11, (B, T))
    counted = measure_flops(model, lambda: model(idx, idx)[1], lambda loss: loss)
    assert counted == B * T * training_flops_per_token(model, T)


def test_compute_dtype_follows_lightning_precision():
    assert compute_dtype("32-true") == torch.float32
    assert compute_dtype("bf16-mixed") == compute_dtype("bf16-true") == torch.bfloat16
    assert compute_dtype("16-mixed") == torch.float16
    assert compute_dtype("64-true") == torch.float64


def test_peak_is_configured_or_measured_on_a_cpu():
    assert peak_flops(torch.device("cpu"), "32-true", 2.5e11) == (2.5e11, "configured")
    measured, source = peak_flops(torch.device("cpu"), "32-true")
    assert source == "measured matmul" and 1e8 < measured < 1e14


@pytest.mark.parametrize("bad", [0, -1.0, True])
def test_a_bad_peak_is_refused_naming_the_key(bad):
    with pytest.raises(ValueError, match=r"callbacks\.throughput\.peak_flops"):
        Throughput(peak_flops=bad)


@pytest.mark.filterwarnings("ignore:.*(val_dataloader|LeafSpec).*")
def test_mfu_callback_logs_flops_per_sec_and_mfu_at_log_steps_only(tmp_path, monkeypatch):
    clock = iter(range(10_000))
    monkeypatch.setattr(callbacks, "time", types.SimpleNamespace(perf_counter=lambda: 0.5 * next(clock)))
    B, T, vocab = 4, 8, 11
    lit = LitGPT(
        model=dict(kind="gpt", context_window=T, embedding_dim=16, num_heads=2, num_layers=1),
        tokenizer={"vocab": "abcdefghijk"},
        optimizer=dict(name="adamw", lr=1e-3, betas=[0.9, 0.99], weight_decay=0.1, fused=False, warmup_steps=0),
    )
    ids = torch.randint(0, vocab, (B * 12, T + 1), generator=torch.Generator().manual_seed(0))
    data = DataLoader(TensorDataset(ids[:, :-1], ids[:, 1:]), batch_size=B)
    trainer = L.Trainer(
        max_steps=12,
        log_every_n_steps=3,
        callbacks=[Throughput(peak_flops=1e6)],
        logger=L.pytorch.loggers.CSVLogger(tmp_path, name="run", version=""),
        enable_progress_bar=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        accelerator="cpu",
    )
    trainer.fit(lit, train_dataloaders=data)
    rows = list(csv.DictReader(open(tmp_path / "run" / "metrics.csv")))
    logged = {name: {int(r["step"]): float(r[name]) for r in rows if r.get(name)} for name in rows[0]}
    assert logged["train/mfu"].keys() == logged["train/loss"].keys() == {2, 5, 8, 11}  # Lightning's log steps
    expected = B * T * training_flops_per_token(lit.model, T) / 0.5  # one batch per 0.5 s of the fake clock
    for step, achieved in logged["train/flops_per_sec"].items():
        assert achieved == pytest.approx(expected)
        assert logged["train/mfu"][step] == pytest.approx(achieved / 1e6)


@pytest.mark.slow
def test_a_training_run_logs_mfu_to_tensorboard_at_its_log_steps(trained):
    run_dir, output = trained
    s = scalars(run_dir)
    assert [step for step, _ in s["train/mfu"]] == [step for step, _ in s["train/loss"]]
    assert [step for step, _ in s["train/flops_per_sec"]] == [step for step, _ in s["train/loss"]]
    assert all(0 < mfu < 1 for _, mfu in s["train/mfu"])  # a tiny model is far from the matmul peak
    assert "MFU peak per device" in output and "(measured matmul)" in output
