"""Every config group option composes, and the keys users type exist."""

import math
from pathlib import Path

import pytest
from hydra.errors import HydraException
from hydra.utils import instantiate
from omegaconf import OmegaConf

from src.data.datamodule import TextDataModule
from src.model import build_model
from src.run.cli import CONFIG_DIR, compose, composer, point_composer


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


SWEEP_POINTS = [
    ["model.num_heads=3", "model.embedding_dim=60", "trainer.max_steps=300"],
    ["model.num_heads=5", "model.embedding_dim=30", "trainer.max_steps=300"],
    ["model.dropout=0", "optimizer.lr=3e-4", "sample.prompt=${model.kind}"],  # int to float; interpolation
    ["experiment=nanogpt_cpu", "model.num_layers=2"],  # a file, then a value inside it
    ["model=seed", "model.output_projection=false", "seed=3"],
    ["trainer=cpu", "trainer.max_steps=7", "+trainer.profiler=simple"],  # an added key: composed in full
    ["sample.prompt='O Romeo, Romeo!'", "~callbacks.attention_maps", "data.val_batch_size=null"],  # quoted; deleted
]


def test_sweep_points_compose_as_hydra_composes_them():
    """The sweep pre-check's shortcut (each choice of files composed once, values applied after)
    gives every point exactly the config a full compose gives it."""
    with point_composer("train") as shortcut:
        fast = [shortcut(point) for point in SWEEP_POINTS]
    with composer("train") as full:
        slow = [full(point) for point in SWEEP_POINTS]
    for point, a, b in zip(SWEEP_POINTS, fast, slow, strict=True):
        assert OmegaConf.to_yaml(a) == OmegaConf.to_yaml(b), point
        assert OmegaConf.is_struct(a)
    assert fast[-2].trainer.profiler == "simple" and fast[-2].trainer.max_steps == 7
    assert fast[-1].sample.prompt == "O Romeo, Romeo!" and "attention_maps" not in fast[-1].callbacks


def test_a_sweep_point_the_shortcut_cannot_apply_fails_as_hydra_fails():
    errors = []
    for compose_with in (point_composer, composer):
        with compose_with("train") as compose_point, pytest.raises(HydraException) as refused:
            compose_point(["model.num_heads=2", "model.embedding_dim=two"])
        errors.append((type(refused.value), str(refused.value), str(refused.value.__cause__)))
    assert errors[0] == errors[1]
    assert "could not be converted to Integer" in errors[0][2]


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
