"""Off the default path: other texts, other run lengths, signals at odd moments, values of every kind.

Each test reproduces a way a run used to end with nothing, lose work or train wrongly.
"""

import inspect
import logging
import math
import os
import re
import shutil
import sys
from pathlib import Path

import lightning as L
import pytest
import torch
from hydra.core.hydra_config import HydraConfig
from hydra.errors import HydraException
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from omegaconf import DictConfig, OmegaConf

from src.rules import ConfigError, one_line
from src.run import preflight, rundir
from src.run.cli import compose, dotted_keys, explain, job_config
from src.training.callbacks import remove_leftovers
from src.training.checkpoint import read_checkpoint
from src.training.gpt_module import NonFiniteLossError
from src.training.heads import AttentionMaps, SampleText
from src.training.optim import WarmupCosine, apply_settings, build_optimizer, build_schedule
from tests.helpers import compose_training, scalars, shakespeare_file, tiny_training, train_in_process

NO_MEDIA = ("callbacks.sample_text=null", "callbacks.attention_maps=null", "sample.max_new_tokens=0")


def last_step(run_dir: Path) -> int:
    return read_checkpoint(run_dir / "checkpoints" / "last.ckpt")["global_step"]


# ---------------------------------------------------------------------------- every run ends with a result


@pytest.mark.parametrize(
    "max_steps,interval,every",
    [(12, 5, None), (7, 50, None), (10, 5, None), (9, 4, 2), (3, 1, 1)],
)
@pytest.mark.slow
def test_every_run_ends_with_a_validation_and_last_ckpt_at_its_newest_step(tmp_path, max_steps, interval, every):
    run = tmp_path / "run"
    overrides = [f"trainer.max_steps={max_steps}", f"trainer.val_check_interval={interval}", *NO_MEDIA]
    if every:
        overrides.append(f"callbacks.last_checkpoint.every_n_train_steps={every}")
    best = train_in_process(run, *overrides)
    assert math.isfinite(best)
    assert last_step(run) == max_steps
    val_steps = [s for s, _ in scalars(run)["loss/val"]]
    assert val_steps[-1] == max_steps and val_steps == sorted(set(val_steps))
    assert (run / "checkpoints" / "best.ckpt").is_file()


@pytest.mark.slow
def test_last_ckpt_moves_on_when_the_val_loss_plateaus(tmp_path):
    """A rate too small to change anything: every validation ties the first, which stays the best."""
    run = tmp_path / "run"
    overrides = ["optimizer=sgd", "optimizer.lr=1e-30", "trainer.max_steps=30", "trainer.val_check_interval=10"]
    train_in_process(run, *overrides, *NO_MEDIA)
    assert read_checkpoint(run / "checkpoints" / "best.ckpt")["global_step"] == 10
    assert last_step(run) == 30  # Lightning's own last.ckpt stayed at 10 here


class LastCkptProbe(L.Callback):
    """Records the step last.ckpt holds at the start of each step."""

    def __init__(self, path: str):
        self.path, self.seen = Path(path), []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.seen.append(read_checkpoint(self.path)["global_step"] if self.path.exists() else None)


def train_with(monkeypatch, run: Path, extra: L.Callback, *overrides: str) -> None:
    """train() in-process with one more callback beside the configured ones."""
    from src.run import preflight
    from src.train import train

    configured = preflight.build_callbacks
    monkeypatch.setattr(preflight, "build_callbacks", lambda *args: [*configured(*args), extra])
    train(compose_training(run, *overrides))


def test_every_n_train_steps_saves_before_the_first_validation(tmp_path, monkeypatch):
    run = tmp_path / "run"
    probe = LastCkptProbe(str(run / "checkpoints" / "last.ckpt"))
    every = "callbacks.last_checkpoint.every_n_train_steps=1"
    train_with(monkeypatch, run, probe, "trainer.max_steps=5", "trainer.val_check_interval=50", every, *NO_MEDIA)
    assert probe.seen == [None, 1, 2, 3, 4]


def test_without_a_logger_a_run_writes_no_events(tmp_path):
    """~logger drops TensorBoard (Lightning's own default logger is not put in its place)."""
    run = tmp_path / "run"
    assert math.isfinite(
        train_in_process(run, "~logger", "trainer.max_steps=3", "trainer.val_check_interval=3", *NO_MEDIA)
    )
    assert last_step(run) == 3 and not (run / "tensorboard").exists() and not (run / "lightning_logs").exists()


def test_the_best_val_loss_is_only_ever_a_real_val_loss(tmp_path):
    run = tmp_path / "run"
    train_in_process(run, "trainer.max_steps=6", "trainer.val_check_interval=3", *NO_MEDIA)
    s = scalars(run)
    best = s["loss/val_best"]
    assert all(math.isfinite(v) and v > 0 for _, v in best)  # never Lightning's -1 hp_metric placeholder
    assert best[-1][1] == pytest.approx(min(v for _, v in s["loss/val"]))


# ---------------------------------------------------------------------------- your own text

CORPORA = {
    "lower-case": lambda text: text.lower(),
    "CJK and emoji": lambda text: "春眠不覚暁、処処聞啼鳥。🌸🐦 夜来風雨声、花落知多少。🌧️\n" * 60,
    "CRLF": lambda text: text.replace("\n", "\r\n"),
    "UTF-8 BOM": lambda text: "\ufeff" + text,
    "tiny": lambda text: text[:400],
}


@pytest.mark.slow
@pytest.mark.parametrize("corpus", CORPORA)
def test_another_text_trains_end_to_end_with_its_samples_and_attention_maps(tmp_path, corpus):
    text = tmp_path / "text.txt"
    text.write_text(CORPORA[corpus](shakespeare_file().read_text()[:20_000]), encoding="utf-8", newline="")
    run = tmp_path / "run"
    overrides = ["trainer.max_steps=6", "trainer.val_check_interval=3", "data.val_fraction=0.1"]
    best = train_in_process(run, *overrides, "model.context_window=8", "sample.max_new_tokens=10", data=text)
    assert math.isfinite(best) and last_step(run) == 6
    assert (run / "result.json").is_file()


@pytest.mark.parametrize(
    "content,pattern",
    [
        ("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", r"only one distinct character \('a'\).*two different"),
        ("\n" * 500, r"only one distinct character \('\\n'\)"),
        ("xy", r"has only 2 characters.*longer text"),
    ],
)
def test_a_text_that_cannot_train_is_refused_with_the_fix(tmp_path, content, pattern):
    text = tmp_path / "text.txt"
    text.write_text(content)
    with pytest.raises(ValueError, match=pattern):
        preflight.plan(compose_training(tmp_path / "run", f"data.path={text}"))
    assert not (tmp_path / "run").exists()


def test_prompts_default_to_the_opening_of_the_text_and_unknown_characters_are_refused_up_front(tmp_path):
    text = tmp_path / "lower.txt"
    text.write_text(shakespeare_file().read_text()[:5000].lower())
    plan = preflight.plan(compose_training(tmp_path / "run", f"data.path={text}"))
    assert plan.prompts["sample"] == "first citizen:"
    assert plan.prompts["attention_maps"] == text.read_text()[:32]
    for key in ("sample.prompt", "callbacks.sample_text.prompt", "callbacks.attention_maps.prompt"):
        with pytest.raises(ConfigError, match=rf"{key} has 4 character\(s\) not in the vocabulary.*'R'.*{key}=null"):
            preflight.plan(compose_training(tmp_path / "run", f"data.path={text}", f"{key}=ROMEO"))


# ---------------------------------------------------------------------------- values of every kind

REFUSED = {
    "trainer.gradient_clip_val=-1": r"trainer.gradient_clip_val must be a finite number >= 0",
    "optimizer.weight_decay=-1": r"optimizer.weight_decay must be a finite number >= 0",
    "trainer.max_steps=0": r"trainer.max_steps must be a positive integer",
    "trainer.max_steps=-5": r"trainer.max_steps must be a positive integer",
    "trainer.val_check_interval=0": r"trainer.val_check_interval must be a positive integer",
    "trainer.accumulate_grad_batches=0": r"trainer.accumulate_grad_batches must be a positive integer",
    "seed=-1": r"seed must be an integer in \[0, 2\*\*32\)",
    "optimizer.betas=[2.0,0.9]": r"optimizer.betas must be two numbers in \[0, 1\)",
    "data.val_batch_size=0": r"data.val_batch_size must be a positive integer",
    "optimizer.lr=inf": r"optimizer.lr must be a positive finite number",
    "progress_bar=maybe": r"progress_bar must be one of auto, true, false",
    "sample.temperature=-1": r"sample.temperature must be >= 0",
}


@pytest.mark.parametrize("override", REFUSED)
def test_bad_values_are_refused_naming_the_key(tmp_path, override):
    with pytest.raises(ConfigError, match=REFUSED[override]):
        preflight.plan(compose_training(tmp_path / "run", override))


COMPOSE_REFUSED = {
    ("seed=abc",): r"^seed: Value 'abc' of type 'str' could not be converted to Integer",
    ("model.embedding_dim=64.5",): r"^model.embedding_dim: Value '64.5'",
    ("model=seed", "model.num_layers=2"): r"unknown config key 'model.num_layers': model has: .*output_projection",
    ("model.num_head=2",): r"did you mean model.num_heads\?",
    ("prompt=ROMEO: ☃",): r"cannot parse the override 'prompt=ROMEO: ☃': quote a value",
    ("model=transformer",): r"unknown option 'transformer' for model: choose one of gpt, seed$",
}


@pytest.mark.parametrize("overrides", COMPOSE_REFUSED)
def test_composition_errors_are_one_line_naming_the_key(overrides):
    with pytest.raises(HydraException) as err:
        compose("train", list(overrides))
    message = explain(err.value, "train", list(overrides))
    assert "\n" not in message
    assert re.search(COMPOSE_REFUSED[overrides], message), message


def test_lightning_trainer_arguments_are_config_keys():
    cfg = compose(
        "train", ["trainer.max_time=00:00:00:10", "trainer.limit_val_batches=0", "trainer.detect_anomaly=true"]
    )
    assert (cfg.trainer.max_time, cfg.trainer.limit_val_batches, cfg.trainer.detect_anomaly) == ("00:00:00:10", 0, True)
    from src.run.config import TRAINER_SET_BY_TRAIN

    arguments = set(inspect.signature(L.Trainer.__init__).parameters) - {"self", *TRAINER_SET_BY_TRAIN}
    assert arguments <= set(cfg.trainer)  # fails loudly when Lightning adds an argument we do not expose


def every_key() -> list[str]:
    """Every key a user can type on train's command line: each leaf of each group (model, data,
    optimizer, trainer, logger, callbacks, sample, sweep), plus keys added with `+`. Left out: the
    keys that say where files go (paths.*, data.cache_dir, dirpath, save_dir, default_root_dir),
    whose random values would write into the project, and data.path/url (the text is fixed here)."""
    cfg = compose("train", ["paths.output_dir=/unused"])
    where = ("paths.", "data.cache_dir", "data.path", "data.url", "logger.save_dir", "trainer.default_root_dir")
    leaves = [
        k
        for k in dotted_keys(cfg)
        if not isinstance(OmegaConf.select(cfg, k), DictConfig) and not k.startswith(where) and "dirpath" not in k
    ]
    added = ["+model.extra", "+data.extra", "+optimizer.extra", "+trainer.extra", "+logger.extra", "+extra"]
    return leaves + added + ["+callbacks.sample_text.extra", "+callbacks.extra._target_"]


EVERY_KEY = every_key()
VALUES = st.one_of(
    st.integers(-(10**12), 10**12).map(str),
    st.integers(-3, 70).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(
        ["null", "true", "false", "abc", "''", "[1,2]", "1e-3", "-0.0", "nan", "inf", "-inf", "gpt", "seed"]
    ),
    st.text(alphabet="aZ:é€ \n", max_size=6).map(lambda s: f"'{s}'"),
)


@pytest.fixture(scope="module")
def small_text(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("text") / "small.txt"
    path.write_text(shakespeare_file().read_text()[:8000])
    return path


class StopAfter(L.Callback):
    """Stop after `steps` optimizer steps, or `batches` batches: an accepted
    trainer.accumulate_grad_batches=10000000001 would otherwise train for days before its first step."""

    def __init__(self, steps: int, batches: int = 8):
        self.steps, self.batches, self.seen = steps, batches, 0

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.seen += 1
        if trainer.global_step >= self.steps or self.seen >= self.batches:
            trainer.should_stop = True


def test_every_key_of_every_group_is_in_the_property_test():
    groups = {k.lstrip("+").split(".")[0] for k in EVERY_KEY}
    assert {"model", "data", "optimizer", "trainer", "logger", "callbacks", "sample", "sweep"} <= groups
    assert {"trainer.precision", "trainer.devices", "callbacks.last_checkpoint.every_n_train_steps"} <= set(EVERY_KEY)
    assert {"data.val_tokens", "data.sampling", "model.kind", "optimizer.name", "+model.extra"} <= set(EVERY_KEY)


@pytest.mark.slow  # 50 examples (~1 s each), each composed, checked, built and (if accepted) trained for 2 steps
@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(key=st.sampled_from(EVERY_KEY), value=VALUES)
# Found by random runs: no step for days; 0 divided by zero inside Lightning; 1 crashed inside Lightning;
# the head scores' file.
@example(key="trainer.accumulate_grad_batches", value="10000000001")
@example(key="trainer.check_val_every_n_epoch", value="0")
@example(key="trainer.profiler", value="1")
@example(key="callbacks.head_scores.path", value="5")  # Path(5) raised inside the callback
@example(key="callbacks.head_scores.path", value="'.'")  # a folder: the snapshot's rename failed at step 0
def test_any_value_of_any_key_is_accepted_or_refused_in_one_line_naming_the_key(
    small_text, tmp_path, monkeypatch, key, value
):
    """Through the CLI's own path: compose, then the pre-check, with nothing written. What passes
    must train: its parts are built as train() builds them and take two optimizer steps (or, when
    one step accumulates more batches than that, train a few batches)."""
    run = tmp_path / "run"
    shutil.rmtree(run, ignore_errors=True)
    monkeypatch.chdir(tmp_path)  # a relative path given to a key (callbacks.head_scores.path=abc) is written here
    overrides = [f"data.path={small_text}", "model.context_window=16", "model.num_layers=1", f"{key}={value}"]
    try:
        cfg = compose_training(run, *overrides)
    except HydraException as err:
        message = explain(err, "train", overrides)
        named = key.lstrip("+").removesuffix("._target_")
        assert "\n" not in message and (named in message or "cannot parse" in message), message
        return
    from src.train import build

    try:
        datamodule, module, trainer = build(cfg, preflight.plan(cfg))  # as the command line plans and builds it
    except ValueError as err:
        message = one_line(err)  # as the command prints it: error: <one line>
        assert "\n" not in message and key.lstrip("+").rsplit(".", 1)[-1] in message, message
        assert not run.exists()
        return
    assert not run.exists()
    if trainer.world_size > 1:  # Lightning would start this very pytest again as the other ranks
        return  # several processes train for real in tests/run/test_scaling.py
    # Without the TensorBoard sample and maps (the pre-check checked their values): a sample of
    # millions of characters at the final validation would only take time.
    trainer.callbacks[:] = [c for c in trainer.callbacks if not isinstance(c, (SampleText, AttentionMaps))]
    stop = StopAfter(2)
    trainer.callbacks.append(stop)
    try:
        trainer.fit(module, datamodule=datamodule)
    except NonFiniteLossError as err:  # e.g. optimizer.weight_decay=4.8e13: diverged, said in one line
        assert "\n" not in str(err)
        return
    stepped = trainer.global_step >= 1 or trainer.accumulate_grad_batches > stop.batches
    assert stop.seen >= 1 and (stepped or cfg.trainer.fast_dev_run), f"{key}={value} trained nothing"


# ---------------------------------------------------------------------------- resume and the run directory


def test_a_second_run_in_a_held_run_directory_is_refused(tmp_path):
    run = tmp_path / "run"
    with rundir.hold_run_dir(run):
        with pytest.raises(ConfigError, match="another training is running in"):
            rundir.check_not_in_use(run)
        with pytest.raises(ConfigError, match="another training is running in"):
            with rundir.hold_run_dir(run):
                pass
    rundir.check_not_in_use(run)  # released


def test_a_run_directory_is_locked_before_hydra_writes_into_it(tmp_path, monkeypatch, capsys):
    """Issue 25: of two runs started 0.5 s apart into one hydra.run.dir, the second was refused only
    after it rewrote the first's .hydra/. Now the first holds the lock once its pre-check passed."""
    from src import train as train_module

    run = tmp_path / "run"
    first = tiny_training(tmp_path, f"hydra.run.dir={run}")
    outside = HydraConfig.instance().cfg
    train_module.check(job_config(compose("train", first, with_hydra=True)), first)  # about to start Hydra
    HydraConfig.instance().cfg = outside
    try:
        monkeypatch.setattr(sys, "argv", ["python -m src.train", *first, "seed=7"])
        with pytest.raises(SystemExit) as refused:
            train_module.main()
        assert refused.value.code == 2 and "another training is running in" in capsys.readouterr().err
        assert not (run / ".hydra").exists()
    finally:
        os.close(rundir.HELD.pop(run.absolute()))


def test_resuming_applies_the_typed_schedule_to_the_restored_optimizer():
    model = torch.nn.Linear(4, 4)
    cfg = {"name": "adamw", "lr": 1e-2, "min_lr": 1e-3, "warmup_steps": 0, "decay_steps": 10, "weight_decay": 0.1}
    optimizer = build_optimizer(model, cfg)
    schedule = build_schedule(optimizer, cfg)
    for _ in range(10):
        optimizer.step()
        schedule.step()
    assert optimizer.param_groups[0]["lr"] == pytest.approx(1e-3)  # the old cosine ended at min_lr
    longer = {**cfg, "decay_steps": 20}
    apply_settings(optimizer, schedule, longer)
    expected = 1e-2 * WarmupCosine(0, 20, 0.1)(10)
    assert optimizer.param_groups[0]["lr"] == pytest.approx(expected)  # re-planned: half-way down the new one
    schedule.step()
    assert optimizer.param_groups[0]["lr"] == pytest.approx(1e-2 * WarmupCosine(0, 20, 0.1)(11))


def test_leftover_partial_files_of_dead_writers_are_removed(tmp_path):
    dead = tmp_path / "last.ckpt.partial-999999999"
    alive = tmp_path / f"last.ckpt.partial-{os.getpid()}"
    dead.write_bytes(b"x")
    alive.write_bytes(b"x")
    remove_leftovers(tmp_path)
    assert not dead.exists() and alive.exists()


# ---------------------------------------------------------------------------- the debug presets


@pytest.mark.slow
def test_debug_presets_run_as_documented(tmp_path, caplog):
    smoke = tmp_path / "smoke"
    caplog.set_level(logging.INFO, logger="src")  # the run's lines: src.train, src.run.finish
    assert math.isfinite(train_in_process(smoke, "debug=fast_dev_run", "sample.max_new_tokens=5"))
    said = [r.getMessage() for r in caplog.records]
    assert any(m.startswith("fast_dev_run: val loss ") for m in said)  # not "best val loss X -> " and nothing
    assert not any(m.startswith(("best val loss", "watch it")) for m in said)  # no events to watch
    assert not (smoke / "checkpoints").exists()  # one step and one validation batch, nothing saved

    overfit = tmp_path / "overfit"
    train_in_process(
        overfit,
        "debug=overfit",
        "trainer.max_steps=60",
        "trainer.val_check_interval=null",
        "trainer.check_val_every_n_epoch=30",
    )
    losses = [v for _, v in scalars(overfit)["loss/train"]]
    assert losses[-1] < 0.5 * losses[0]  # one batch, learnt by heart

    profiled = tmp_path / "profiled"
    train_in_process(profiled, "debug=profiler", "trainer.max_steps=5", "trainer.val_check_interval=5", *NO_MEDIA)
    assert "run_training_batch" in (profiled / "fit-profile.txt").read_text()


@pytest.mark.slow
def test_the_final_sample_reads_best_ckpt_from_memory_only_when_memory_holds_it(tmp_path):
    """When the final validation was the best, best.ckpt holds the weights in memory: the sample and
    the explorer page use them without reading the file; otherwise best.ckpt is read."""
    from src.run.finish import in_memory_best
    from src.train import build
    from src.training.checkpoint import load_trained

    cfg = compose_training(tmp_path / "run", "trainer.max_steps=6", "trainer.val_check_interval=3", "optimizer.lr=1e-3")
    datamodule, lit, trainer = build(cfg, preflight.plan(cfg))
    trainer.fit(lit, datamodule=datamodule)
    assert lit.best_val_step == trainer.global_step == 6  # the loss fell at each validation
    in_memory = in_memory_best(trainer, lit)
    on_disk = load_trained(trainer.checkpoint_callback.best_model_path)
    assert in_memory.global_step == on_disk.global_step and in_memory.best_val_loss == on_disk.best_val_loss
    assert in_memory.hparams == on_disk.hparams
    saved = on_disk.model.state_dict()
    assert saved.keys() == in_memory.model.state_dict().keys()
    assert all(torch.equal(weights, saved[name]) for name, weights in in_memory.model.state_dict().items())
    lit.best_val_step = 3  # as if the best validation had come before the last one
    assert in_memory_best(trainer, lit) is None
