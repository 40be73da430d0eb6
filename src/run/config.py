"""Config schemas: what each key under conf/ may hold, enforced by OmegaConf when Hydra composes.

One schema per concept, registered in Hydra's ConfigStore; every YAML file under conf/ names its
schema first in its defaults list. OmegaConf itself then refuses unknown keys and values of the
wrong type (`model.embedding_dim=64.5`), naming the key. The schemas of the model, the data and
the Trainer are read off the classes they configure (GPTConfig, the DataModule's and the
Trainer's constructors), so every argument of those is a key and no list is kept twice.
What a type cannot say (a positive rate, heads that divide the width) is `check_values`.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import re
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf

from src.model.gpt import GPTConfig
from src.model.seed_gpt import SeedGPTConfig
from src.run import rules
from src.run.rules import ConfigError
from src.training.optim import OPTIMIZERS

PRIMITIVES = (int, float, str, bool)


def omegaconf_type(hint: Any) -> Any:
    """The type OmegaConf can check for a Python annotation: int, Optional[float], ...; else Any."""
    if hint in PRIMITIVES:
        return hint
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1 and rest[0] in PRIMITIVES and len(args) == 2:
            return rest[0] | None
    return Any


def schema_of(target: Callable, name: str, skip: tuple[str, ...] = (), **extra: Any) -> type:
    """A dataclass with one typed field per parameter of `target` (a class), plus `extra` fields."""
    hints = typing.get_type_hints(target.__init__)
    fields = []
    for p in inspect.signature(target).parameters.values():
        if p.name in skip or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        default = MISSING if p.default is p.empty else p.default
        kind = omegaconf_type(hints.get(p.name, Any))
        if not (default is None or default is MISSING or isinstance(default, PRIMITIVES)):
            kind, default = Any, None  # an object default (an enum, a callable) is left to the target
        fields.append((p.name, kind, field(default=default)))
    fields += [(key, type(value), field(default=value)) for key, value in extra.items()]
    return dataclasses.make_dataclass(name, fields)


# ---------------------------------------------------------------------------- the schemas

GPTSchema = schema_of(GPTConfig, "GPTSchema", skip=("vocab_size",), kind="gpt")
SeedSchema = schema_of(SeedGPTConfig, "SeedSchema", skip=("vocab_size",), kind="seed")


@dataclass
class SampleSchema:
    """The sample printed when training ends (max_new_tokens=0: none)."""

    prompt: str | None = None
    max_new_tokens: int = 300
    temperature: float = 0.8
    top_k: int | None = None
    top_p: float | None = None


@dataclass
class SweepSchema:
    """Multirun settings (docs/sweeps.md)."""

    jobs_per_gpu: int = 1
    media: bool = False


@dataclass
class TrainSchema:
    seed: int = 1337
    ckpt_path: str | None = None
    finetune: bool = False
    compile: bool = False
    overwrite: bool = False
    progress_bar: str = "auto"
    explorer: bool = True
    sample: SampleSchema = field(default_factory=SampleSchema)
    sweep: SweepSchema = field(default_factory=SweepSchema)
    # The groups: each checked by its own schema when its YAML file is composed.
    paths: Any = None
    model: Any = None
    data: Any = None
    optimizer: Any = None
    trainer: Any = None
    logger: Any = None
    callbacks: Any = None


@dataclass
class GenerateSchema:
    ckpt_path: str | None = None
    prompt: str = "ROMEO:"
    max_new_tokens: int = 500
    num_samples: int = 1
    temperature: float = 0.8
    top_k: int | None = None
    top_p: float | None = None
    greedy: bool = False
    seed: int | None = 1337
    device: str = "auto"
    paths: Any = None


@dataclass
class EvaluateSchema:
    ckpt_path: str | None = None
    data_path: str | None = None
    batch_size: int | None = None
    val_tokens: int | None = None
    device: str = "auto"
    paths: Any = None


@dataclass
class PlotAttentionSchema:
    ckpt_path: str | None = None
    prompt: str = "ROMEO:\nO, she doth teach the torch"
    out: str | None = None
    paths: Any = None


@dataclass
class ExploreSchema:
    ckpt_path: str | None = None
    out: str | None = None
    prompt: str | None = None
    text: str | None = None
    excerpt_chars: int = 2000
    weights: str = "auto"
    paths: Any = None


def register(config_name: str) -> None:
    """Put the schemas a command composes into Hydra's ConfigStore, where conf/'s defaults lists find
    them. Only `train` reads the DataModule's and the Trainer's: sampling never imports Lightning."""
    store = ConfigStore.instance()
    store.store(name="generate_schema", node=GenerateSchema)
    store.store(name="evaluate_schema", node=EvaluateSchema)
    store.store(name="plot_attention_schema", node=PlotAttentionSchema)
    store.store(name="explore_schema", node=ExploreSchema)
    if config_name != "train":
        return
    from lightning.pytorch import Trainer

    from src.data.datamodule import TextDataModule

    store.store(name="train_schema", node=TrainSchema)
    store.store(group="model", name="gpt_schema", node=GPTSchema)
    store.store(group="model", name="seed_schema", node=SeedSchema)
    for name, settings in OPTIMIZERS.items():  # the optimizers' settings, typed where they are used
        store.store(group="optimizer", name=f"{name}_schema", node=settings)
    data = schema_of(TextDataModule, "DataSchema", skip=DATA_SET_BY_TRAIN, _target_="")
    store.store(group="data", name="data_schema", node=data)
    # Trainer(...) takes every key but the objects train() hands it itself.
    trainer = schema_of(Trainer, "TrainerSchema", skip=TRAINER_SET_BY_TRAIN, _target_="lightning.pytorch.Trainer")
    store.store(group="trainer", name="trainer_schema", node=trainer)


TRAINER_SET_BY_TRAIN = ("callbacks", "logger", "plugins", "enable_progress_bar")
# model.context_window is the one key of the window: the DataModule is handed it, never configured with it.
DATA_SET_BY_TRAIN = ("tokenizer", "corpus", "context_window")


# ---------------------------------------------------------------------------- values
# Each rule is written once in src/run/rules.py; these functions say which keys it applies to.


def check_model(model: DictConfig) -> None:
    """The model config's own checks (kind, options, sizes, heads dividing the width), without building it."""
    from src.model import model_config

    model_config(OmegaConf.to_container(model, resolve=True), vocab_size=2)


def check_optimizer(opt: DictConfig) -> None:
    name = opt.name
    rules.choice("optimizer.name", name, tuple(OPTIMIZERS))
    options = {f.name for f in dataclasses.fields(OPTIMIZERS[name])}
    anyones = {f.name for schema in OPTIMIZERS.values() for f in dataclasses.fields(schema)}
    unknown = sorted(set(opt) - anyones)
    if unknown:  # a key no optimizer has (`+optimizer.extra=0`)
        rules.unknown_key(f"optimizer.{unknown[0]}", f"optimizer={name}", sorted(options))
    if set(opt) != options:
        raise ConfigError(
            f"optimizer.name={name} keeps the options of another optimizer: "
            f"choose the optimizer with optimizer={name} instead, which brings its own options"
        )
    rules.finite("optimizer.lr", opt.lr, 0.0, "a positive finite number", strict=True)
    if opt.min_lr is not None:
        rules.finite("optimizer.min_lr", opt.min_lr, 0.0, "a finite number >= 0")
    rules.finite("optimizer.weight_decay", opt.weight_decay, 0.0, "a finite number >= 0 (0 turns decay off)")
    rules.non_negative_int("optimizer.warmup_steps", opt.warmup_steps)
    if opt.decay_steps is not None:
        rules.positive_int("optimizer.decay_steps", opt.decay_steps, "or null for trainer.max_steps")
    if "betas" in opt and (len(opt.betas) != 2 or not all(rules.is_number(b) and 0.0 <= b < 1.0 for b in opt.betas)):
        rules.refuse("optimizer.betas", list(opt.betas), "two numbers in [0, 1), e.g. [0.9,0.99]")
    if "momentum" in opt:
        rules.finite("optimizer.momentum", opt.momentum, 0.0, "a finite number >= 0")
    if name == "muon":
        rules.finite("optimizer.adam_lr", opt.adam_lr, 0.0, "a positive finite number", strict=True)
        rules.positive_int("optimizer.ns_steps", opt.ns_steps, "Newton-Schulz iterations, e.g. 5")
        rules.choice("optimizer.ns_dtype", opt.ns_dtype, ("float32", "bfloat16"))
        if not opt.momentum < 1:
            rules.refuse("optimizer.momentum", opt.momentum, "in [0, 1) for Muon", "e.g. 0.95")


def check_data(data: DictConfig, context_window: int) -> None:
    rules.positive_int("data.batch_size", data.batch_size)
    if data.val_batch_size is not None:
        rules.positive_int("data.val_batch_size", data.val_batch_size, "or null to size batches by tokens")
    if not (rules.is_int(data.num_workers) and 0 <= data.num_workers <= (os.cpu_count() or 1)):
        rules.refuse("data.num_workers", data.num_workers, f"between 0 and this machine's {os.cpu_count()} cores")
    rules.split_fractions(data.val_fraction, data.test_fraction)
    rules.val_tokens(data.val_tokens, context_window)
    rules.choice("data.sampling", data.sampling, rules.SAMPLING)


def check_trainer(trainer: DictConfig) -> None:
    rules.positive_int("trainer.max_steps", trainer.max_steps, "the number of optimizer steps to train")
    interval = trainer.val_check_interval
    if interval is not None:
        rules.positive_int("trainer.val_check_interval", interval, "steps between validations")
    rules.positive_int("trainer.accumulate_grad_batches", trainer.accumulate_grad_batches)
    max_time = trainer.get("max_time")
    if max_time is not None and not (isinstance(max_time, str) and re.fullmatch(r"\d+:\d\d:\d\d:\d\d", max_time)):
        rules.refuse("trainer.max_time", max_time, 'null or a duration "DD:HH:MM:SS"', 'e.g. "00:12:00:00"')
    overfit = trainer.get("overfit_batches")
    # Batches come from an endless random stream: Lightning can repeat one (debug=overfit), not take a share.
    if overfit is not None and (not rules.is_number(overfit) or overfit not in (0, 1)):
        rules.refuse("trainer.overfit_batches", overfit, "0 or 1", "debug=overfit trains on one batch over and over")
    if trainer.log_every_n_steps is not None:
        rules.positive_int("trainer.log_every_n_steps", trainer.log_every_n_steps)
    if trainer.get("check_val_every_n_epoch") is not None:  # 0 divided by zero inside Lightning
        rules.positive_int(
            "trainer.check_val_every_n_epoch", trainer.check_val_every_n_epoch, "or null to validate by steps"
        )
    profiler = trainer.get("profiler")
    if not (profiler is None or isinstance(profiler, DictConfig) or profiler in ("simple", "advanced", "pytorch")):
        rules.refuse("trainer.profiler", profiler, "null, simple, advanced or pytorch", "or use debug=profiler")
    clip = trainer.gradient_clip_val
    if clip is not None:
        rules.finite("trainer.gradient_clip_val", clip, 0.0, "a finite number >= 0 (0 or null turns clipping off)")
    if trainer.limit_train_batches not in (None, 1.0):
        rules.refuse(
            "trainer.limit_train_batches",
            trainer.limit_train_batches,
            "null",
            "training batches are an endless stream with no epoch to limit; set trainer.max_steps instead",
        )
    if trainer.enable_checkpointing is False:
        rules.refuse(
            "trainer.enable_checkpointing",
            False,
            "true",
            "every run keeps checkpoints/best.ckpt and last.ckpt (debug=fast_dev_run is the run that saves none)",
        )


def check_sample(key: str, sample: DictConfig) -> None:
    """Sampling settings, also of callbacks (whose configs have no schema: types are checked here)."""
    rules.sampling(f"{key}.", sample.max_new_tokens, sample.temperature, sample.get("top_k"), sample.get("top_p"))
    rules.sample_fits(f"{key}.max_new_tokens", sample.max_new_tokens)


def check_evaluate(cfg: DictConfig, argv: list[str]) -> None:
    """Ranges of `python -m src.evaluate`'s own keys."""
    if cfg.batch_size is not None:
        rules.positive_int("batch_size", cfg.batch_size, "or null")
    if cfg.val_tokens is not None:
        rules.positive_int("val_tokens", cfg.val_tokens, "or null")


def check_precision(cfg: DictConfig) -> None:
    """fp16 scales the loss and a fused AdamW unscales the gradients inside its own step, after the
    clipping of GPTModule.configure_gradient_clipping: it would clip gradients still scaled by 2^16.
    (Lightning refuses this pairing in its own clipping, which ours replaces.) On the CPU Lightning
    trains 16-mixed as bf16-mixed, without a scaler."""
    precision, clip = str(cfg.trainer.precision), cfg.trainer.gradient_clip_val
    if precision in ("16", "16-mixed") and cfg.optimizer.get("fused") and clip and cfg.trainer.accelerator != "cpu":
        raise ConfigError(
            f"trainer.precision={precision} with optimizer.fused=true cannot clip (trainer.gradient_clip_val={clip}): "
            f"the fused AdamW unscales the gradients inside its step, after clipping; set optimizer.fused=false, "
            f"trainer.precision=bf16-mixed, or trainer.gradient_clip_val=0"
        )


def check_keys(prefix: str, node: DictConfig, schema: type, owner: str) -> None:
    """Hydra's `+key=value` adds a key even to a schema's node: refuse one the schema does not have."""
    options = [f.name for f in dataclasses.fields(schema)]
    unknown = sorted(set(node) - set(options))
    if unknown:
        rules.unknown_key(f"{prefix}{unknown[0]}", owner, options)


def check_values(cfg: DictConfig) -> None:
    """Ranges and relations of a composed train config; raises ConfigError naming the key."""
    check_keys("", cfg, TrainSchema, "the train config")
    check_keys("sample.", cfg.sample, SampleSchema, "sample")
    check_keys("sweep.", cfg.sweep, SweepSchema, "sweep")
    rules.seed("seed", cfg.seed)
    rules.choice("progress_bar", str(cfg.progress_bar).lower(), ("auto", "true", "false"))
    check_model(cfg.model)
    check_data(cfg.data, cfg.model.context_window)
    check_optimizer(cfg.optimizer)
    check_trainer(cfg.trainer)
    check_precision(cfg)
    check_sample("sample", cfg.sample)
    checkpoint = cfg.callbacks.get("model_checkpoint") if cfg.callbacks is not None else None
    if checkpoint is not None and "monitor" in checkpoint:
        rules.monitored("callbacks.model_checkpoint.monitor", checkpoint.monitor)
    progress = (cfg.get("callbacks") or {}).get("progress_log")
    if progress is not None:
        every = progress.get("every_seconds")
        rules.finite("callbacks.progress_log.every_seconds", every, 0.0, "a number >= 0 (seconds between lines)")
    heads = (cfg.get("callbacks") or {}).get("head_scores")
    if heads is not None and cfg.model.context_window < 4:
        raise ConfigError(
            f"callbacks.head_scores needs model.context_window >= 4 (its probe is a string written twice), "
            f"got {cfg.model.context_window}: widen the window, or callbacks.head_scores=null"
        )
    rules.sweep(cfg.sweep.jobs_per_gpu, cfg.sweep.media)
