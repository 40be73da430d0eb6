"""Every config group option composes, and the keys users type exist."""

import math
from pathlib import Path

import pytest
from hydra.utils import instantiate
from omegaconf import OmegaConf

from src.data.datamodule import TextDataModule
from src.model import build_model
from src.run.cli import CONFIG_DIR, compose


def options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONFIG_DIR / group).glob("*.yaml"))


@pytest.mark.parametrize("model", options("model"))
@pytest.mark.parametrize("optimizer", options("optimizer"))
def test_model_and_optimizer_options_compose_and_build(model, optimizer):
    cfg = compose("train", [f"model={model}", f"optimizer={optimizer}"])
    model_cfg = OmegaConf.to_container(cfg.model, resolve=True)
    net = build_model(model_cfg, vocab_size=65)
    assert net.context_window == cfg.model.context_window
    assert "context_window" not in cfg.data  # one key for one concept: the model's


@pytest.mark.parametrize("trainer", options("trainer"))
def test_trainer_options_compose(trainer):
    cfg = compose("train", [f"trainer={trainer}"])
    assert cfg.trainer._target_ == "lightning.pytorch.Trainer"
    assert cfg.trainer.max_steps > 0


@pytest.mark.parametrize("experiment", options("experiment"))
def test_experiments_compose_and_build(experiment):
    cfg = compose("train", [f"experiment={experiment}"])
    build_model(OmegaConf.to_container(cfg.model, resolve=True), vocab_size=65)


def test_the_keys_users_type_exist():
    cfg = compose(
        "train",
        [
            "model.num_heads=5",
            "model.embedding_dim=120",
            "model.context_window=32",
            "model.num_layers=2",
            "trainer.max_steps=10",
            "seed=7",
        ],
    )
    assert (cfg.model.num_heads, cfg.model.context_window, cfg.trainer.max_steps, cfg.data.seed) == (5, 32, 10, 7)
    build_model(OmegaConf.to_container(cfg.model, resolve=True), vocab_size=65)  # the defaults accept 5 heads


def test_the_seed_preset_is_the_notes_model():
    cfg = compose("train", ["model=seed"])
    assert (cfg.model.context_window, cfg.model.embedding_dim, cfg.model.num_heads) == (10, 60, 5)


def test_callbacks_logger_and_datamodule_instantiate(tmp_path):
    cfg = compose("train", [f"paths.log_dir={tmp_path}", "paths.output_dir=" + str(tmp_path / "run")])
    for callback in cfg.callbacks.values():
        instantiate(callback)
    logger = instantiate(cfg.logger)
    assert Path(logger.log_dir) == tmp_path / "run" / "tensorboard"
    dm = instantiate(cfg.data, context_window=cfg.model.context_window)
    assert isinstance(dm, TextDataModule)
    assert dm.context_window == cfg.model.context_window


def test_the_preset_switches_every_option_to_the_notes():
    cfg = compose("train", ["experiment=notes_recipe"])
    m = cfg.model
    assert (m.kind, m.context_window, m.embedding_dim, m.num_heads) == ("seed", 10, 60, 5)
    assert (m.init, m.ln_affine, m.embedding_scale, m.output_projection) == ("notes", False, False, False)
    assert cfg.optimizer.name == "sgd" and cfg.optimizer.momentum == 0 and cfg.optimizer.weight_decay == 0
    assert cfg.optimizer.lr == pytest.approx(1e-3 * cfg.data.batch_size)  # the per-window rate, summed
    assert cfg.data.sampling == "epoch" and cfg.trainer.gradient_clip_val is None
    windows = 1_003_855 - 10  # Tiny Shakespeare's train split
    assert cfg.trainer.max_steps == math.ceil(windows / cfg.data.batch_size)  # one epoch
