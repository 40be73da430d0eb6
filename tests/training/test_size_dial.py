"""model.scale (issue 46): one dial sets the three sizes by its rule, and AdamW's rate for the weight
matrices follows the width (muP for Adam), the other parameters' rate staying optimizer.lr."""

import json

import pytest
import torch

from src.model import GPTConfig, build_model
from src.training.gpt_module import GPTModule
from src.training.optim import build_optimizer
from tests.helpers import train_in_process


@pytest.mark.parametrize(("k", "sizes"), [(1, (1, 16, 1)), (3, (3, 48, 3)), (5, (5, 80, 5))])
def test_the_dial_sets_layers_width_and_heads(k, sizes):
    cfg = GPTConfig(vocab_size=65, scale=k, num_layers=9, embedding_dim=48, num_heads=2)  # a preset's sizes
    assert (cfg.num_layers, cfg.embedding_dim, cfg.num_heads) == sizes


def test_adamw_matrices_take_lr_times_128_over_d_and_the_rest_lr():
    optimizer_cfg = {"name": "adamw", "lr": 2e-3, "decay_steps": 10, "hidden_lr_scale": 128 / 32}
    model = build_model({"kind": "gpt", "scale": 2}, 65)
    matrices, rest = build_optimizer(model, optimizer_cfg).param_groups
    assert matrices["lr"] == pytest.approx(8e-3) and rest["lr"] == 2e-3
    assert {p.shape for p in matrices["params"]} == {torch.Size([32, 32]), torch.Size([32, 128]), torch.Size([128, 32])}


def test_a_scaled_run_trains_the_scaled_model_at_the_scaled_rate(tmp_path):
    """scale=3 over tiny_training's sizes (d 32, 2 layers, 2 heads): 3 layers of d 48, 3 heads, and the
    matrices at 1e-2 x 128/48, as the run's checkpoint and its optimizer say."""
    run = tmp_path / "run"
    train_in_process(
        run, "model.scale=3", "trainer.max_steps=2", "data.val_tokens=2000", "trainer.num_sanity_val_steps=0"
    )
    result = json.loads((run / "result.json").read_text())
    assert result["parameter_counts"]["transformer"] == 3 * (12 * 48 * 48 + 2 * 48)
    checkpoint = torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    model = checkpoint["hyper_parameters"]["model"]
    assert (model["scale"], model["num_layers"], model["embedding_dim"], model["num_heads"]) == (3, 3, 48, 3)
    groups = checkpoint["optimizer_states"][0]["param_groups"]
    assert [g["initial_lr"] for g in groups] == [pytest.approx(1e-2 * 128 / 48), 1e-2]
    assert GPTModule.from_checkpoint(run / "checkpoints" / "last.ckpt").model.cfg.embedding_dim == 48
