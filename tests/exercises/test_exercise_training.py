"""Training with the learner's pieces swapped in (SCRATCHGPT_EXERCISES): the reference's own code copied
in trains to the reference's val loss, a blank stops the run at its step, and the swap needs the plain
path. The reference in src/ is never written."""

from __future__ import annotations

import hashlib

import pytest
import torch

import src.model.attention
import src.model.kv_cache
import src.model.language_model
import src.model.layers
from src import exercises
from src.exercises import EXERCISES, write
from src.model import build_model
from src.model.generation import generate
from src.rules import ConfigError
from src.run.cli import compose
from src.train import train as run_training
from tests.helpers import ROOT, tiny_training


def src_hashes() -> dict[str, str]:
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted((ROOT / "src").rglob("*.py"))}


@pytest.fixture
def learner(tmp_path, monkeypatch):
    """A learner's folder in tmp_path; whatever a test swaps in is swapped back out after it."""
    monkeypatch.setenv("SCRATCHGPT_EXERCISES_DIR", str(tmp_path / "mine"))
    monkeypatch.delenv("SCRATCHGPT_EXERCISES", raising=False)
    before = src_hashes()
    yield tmp_path
    exercises.restore()
    assert src_hashes() == before  # the reference is never written


def tiny_run(run_dir, kind: str) -> float:
    """tiny_training's run, on the plain path, of either model (SeedGPT has no num_layers)."""
    args = [a for a in tiny_training(run_dir.parent) if kind == "gpt" or not a.startswith("model.num_layers")]
    return run_training(compose("train", [*args, f"model={kind}", "model.fused=false", f"paths.output_dir={run_dir}"]))


@pytest.mark.slow  # four tiny trainings
@pytest.mark.parametrize("kind", ["gpt", "seed"])
def test_the_reference_copied_in_trains_to_the_reference_val_loss(kind, learner, monkeypatch):
    reference = tiny_run(learner / "reference" / "run", kind)
    for name in EXERCISES:
        write(name, solution=True)
    exercises.use(list(EXERCISES))  # as src.exercises.run does before it trains
    yours = tiny_run(learner / "yours" / "run", kind)
    # the run built its model from the learner's files: every piece is theirs until restore()
    assert src.model.attention.scaled_dot_product_attention.__module__ == "scratchgpt_exercise_attention"
    assert type(src.model.layers.norm_layer("layer", 4)).__module__ == "scratchgpt_exercise_layer_norm"
    assert src.model.language_model.KVCache.__module__ == "scratchgpt_exercise_kv_cache"
    assert src.model.language_model.cross_entropy.__module__ == "scratchgpt_exercise_cross_entropy"
    assert abs(yours - reference) <= 1e-6, (yours, reference)
    exercises.restore()
    assert src.model.attention.scaled_dot_product_attention.__module__ == "src.model.attention"


@pytest.mark.parametrize("name", list(EXERCISES))
def test_a_blank_piece_stops_the_model_at_its_step(name, learner, monkeypatch):
    """Each piece is on the path a training step and a cached sample take: its blank raises there."""
    write(name)
    exercises.use([name])
    torch.manual_seed(0)
    idx = torch.randint(0, 11, (2, 8))
    step = EXERCISES[name].step
    with pytest.raises(NotImplementedError, match=f"exercise {name}, the notes' step '{step}'"):
        config = {"kind": "gpt", "context_window": 8, "embedding_dim": 12, "num_heads": 3, "fused": False}
        model = build_model(config, 11)
        _, loss = model(idx, idx)
        loss.backward()
        generate(model, idx[:, :2], 6, greedy=True, use_cache=True)


def test_a_run_refuses_unknown_exercises_and_the_fused_kernels(learner, monkeypatch):
    monkeypatch.setenv("SCRATCHGPT_EXERCISES", "attention,flash")
    with pytest.raises(ConfigError, match="SCRATCHGPT_EXERCISES: unknown exercise 'flash': choose one of causal_mask"):
        exercises.use_selected(fused=False)
    write("attention")
    monkeypatch.setenv("SCRATCHGPT_EXERCISES", "attention")
    with pytest.raises(ConfigError, match="add model.fused=false"):
        exercises.use_selected(fused=True)
    (learner / "mine" / "attention.py").write_text("def scaled_dot_product_attention(:\n")
    broken = r"attention.py does not load \(SyntaxError.*make exercise-reset NAME=attention"
    with pytest.raises(ConfigError, match=broken):
        exercises.use_selected(fused=False)
