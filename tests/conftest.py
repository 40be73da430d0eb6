from pathlib import Path

import pytest
import torch

from src.model import GPT, GPTConfig, SeedGPT, SeedGPTConfig
from tests.helpers import run_cli, tiny_training

VOCAB = 11


def tiny_model(kind: str, fused: bool = False, **overrides) -> torch.nn.Module:
    """A small model of either kind with a fixed seed, so two calls build the same weights."""
    torch.manual_seed(0)
    if kind == "seed":
        return SeedGPT(
            SeedGPTConfig(vocab_size=VOCAB, context_window=8, embedding_dim=12, num_heads=3, fused=fused, **overrides)
        )
    cfg = dict(vocab_size=VOCAB, context_window=12, embedding_dim=16, num_heads=4, num_layers=2, fused=fused)
    return GPT(GPTConfig(**{**cfg, **overrides}))


@pytest.fixture(params=["seed", "gpt"])
def kind(request) -> str:
    return request.param


@pytest.fixture(scope="session")
def trained(tmp_path_factory) -> tuple[Path, str]:
    """One tiny training run that several tests read: its run directory and what it printed."""
    log_dir = tmp_path_factory.mktemp("outputs")
    run_dir = log_dir / "run"
    result = run_cli("train", *tiny_training(log_dir, f"hydra.run.dir={run_dir}"))
    assert result.returncode == 0, result.stderr[-3000:]
    return run_dir, result.stdout + result.stderr
