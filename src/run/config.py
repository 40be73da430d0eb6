"""Config schemas, registered in Hydra's ConfigStore and named first in each YAML file's defaults
list: OmegaConf refuses unknown keys and wrong types, naming the key. The model's, the data's and the
Trainer's are read off the classes they configure, so no list of keys is kept twice. `check_values`
holds the rules a type cannot say that no constructor of ours checks (the optimizers', the Trainer's);
`command_help` is `--help`'s text.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import shutil
import textwrap
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, ListConfig, OmegaConf

from src import rules
from src.model.checks import setting
from src.model.gpt import GPTConfig
from src.model.seed_gpt import SeedGPTConfig
from src.rules import ConfigError
from src.training.optim import OPTIMIZERS, settings

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


def schema_of(
    target: Callable, name: str, skip: tuple[str, ...] = (), help: dict[str, str] | None = None, **extra: Any
) -> type:
    """A dataclass with one typed field per parameter of `target` (a class), plus `extra` fields, each
    with its one line for --help (metadata["help"]): a dataclass target's own, else `help`'s."""
    hints = typing.get_type_hints(target.__init__)
    lines = dict(help or {})
    if dataclasses.is_dataclass(target):
        lines |= {f.name: f.metadata["help"] for f in dataclasses.fields(target) if "help" in f.metadata}
    fields = []
    for p in inspect.signature(target).parameters.values():
        if p.name in skip or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        default = MISSING if p.default is p.empty else p.default
        kind = omegaconf_type(hints.get(p.name, Any))
        if not (default is None or default is MISSING or isinstance(default, PRIMITIVES)):
            kind, default = Any, None  # an object default (an enum, a callable) is left to the target
        fields.append((p.name, kind, field(default=default, metadata=described(lines.get(p.name)))))
    fields += [
        (key, type(value), field(default=value, metadata=described(lines.get(key)))) for key, value in extra.items()
    ]
    return dataclasses.make_dataclass(name, fields)


def described(line: str | None) -> dict[str, str]:
    return {} if line is None else {"help": line}


# ---------------------------------------------------------------------------- the schemas

KIND = {"kind": "the model: chosen with model=gpt or model=seed, which bring its keys"}
GPTSchema = schema_of(GPTConfig, "GPTSchema", skip=("vocab_size",), help=KIND, kind="gpt")
SeedSchema = schema_of(SeedGPTConfig, "SeedSchema", skip=("vocab_size",), help=KIND, kind="seed")


CHECKPOINT = "a .ckpt file or a run directory (its best.ckpt); null = the newest run under outputs/"
PATHS = "where the data and the runs are kept (conf/paths)"
TOP_K = "k: draw only from the k most likely characters; null = all"
TOP_P = "p: draw from the fewest characters whose probabilities sum to p; null = all"


@dataclass
class SampleSchema:
    """The sample printed when training ends (max_new_tokens=0: none)."""

    prompt: str | None = setting(None, "null: the first line of the training text")
    max_new_tokens: int = setting(300, "characters to write; 0: no sample")
    temperature: float = setting(0.8, "0 = greedy")
    top_k: int | None = setting(None, TOP_K)
    top_p: float | None = setting(None, TOP_P)


@dataclass
class SweepSchema:
    """Multirun settings (docs/sweeps.md)."""

    jobs_per_gpu: int = setting(1, "hydra/launcher=parallel on a GPU machine: how many jobs share each GPU")
    # Sweep jobs skip the samples and attention maps, which cost more than a small job's training.
    media: bool = setting(False, "true: sweep jobs keep their samples and attention maps")


@dataclass
class TrainSchema:
    seed: int = setting(1337, "the weights' initialisation, the batches and the final sample")
    # Step, optimizer, schedule and data position continue from the checkpoint.
    ckpt_path: str | None = setting(None, "resume: a .ckpt file, a run directory (its last.ckpt), or last (the newest)")
    finetune: bool = setting(False, "true: resume on another data.path (fine-tuning), with the run's vocabulary")
    # On a small CPU it costs more than it saves (BENCHMARKS.md).
    compile: bool = setting(False, "torch.compile the model")
    overwrite: bool = setting(False, "sweeps: rerun the jobs that already finished in the sweep directory")
    progress_bar: str = setting("auto", "auto: a bar on an interactive terminal outside CI; true or false to force it")
    explorer: bool = setting(True, "write <run dir>/explore.html from best.ckpt at the end (python -m src.explore)")
    sample: SampleSchema = field(default_factory=SampleSchema, metadata={"help": "the sample printed at the end"})
    sweep: SweepSchema = field(default_factory=SweepSchema, metadata={"help": "multirun sweeps (docs/sweeps.md)"})
    # The groups: each checked by its own schema when its YAML file is composed.
    paths: Any = setting(None, PATHS)
    model: Any = setting(None, "model=gpt or model=seed")
    data: Any = setting(None, "the text and its batches (TextDataModule)")
    optimizer: Any = setting(None, "optimizer=adamw, sgd or muon")
    trainer: Any = setting(None, "Lightning's Trainer")
    logger: Any = setting(None, "the trackers: logger=tensorboard, csv, ...")
    callbacks: Any = setting(None, "Lightning callbacks")


def register(config_name: str) -> None:
    """Put train's schemas into Hydra's ConfigStore (each other command stores its own on import)."""
    if config_name != "train":
        return
    from lightning.pytorch import Trainer

    from src.data.datamodule import TextDataModule

    store = ConfigStore.instance()
    store.store(name="train_schema", node=TrainSchema)
    store.store(group="model", name="gpt_schema", node=GPTSchema)
    store.store(group="model", name="seed_schema", node=SeedSchema)
    for name, schema in OPTIMIZERS.items():  # the optimizers' settings, typed where they are used
        store.store(group="optimizer", name=f"{name}_schema", node=schema)
    data = schema_of(TextDataModule, "DataSchema", skip=DATA_SET_BY_TRAIN, help=TextDataModule.HELP, _target_="")
    store.store(group="data", name="data_schema", node=data)
    # Trainer(...) takes every key but the objects train() hands it itself.
    target = "lightning.pytorch.Trainer"
    trainer = schema_of(Trainer, "TrainerSchema", skip=TRAINER_SET_BY_TRAIN, help=TRAINER_HELP, _target_=target)
    store.store(group="trainer", name="trainer_schema", node=trainer)


TRAINER_SET_BY_TRAIN = ("callbacks", "logger", "plugins", "enable_progress_bar")
# The one line --help prints for the Trainer's keys this project sets (Lightning's docs say the rest).
TRAINER_HELP = {
    "max_steps": "optimizer steps to train",
    "val_check_interval": "steps between validations over the whole val split",
    "log_every_n_steps": "steps between the training loss's points in TensorBoard",
    "precision": "32-true, bf16-mixed, 16-mixed, ...",
    "accelerator": "auto: a GPU when there is one, else the CPU",
    "devices": "how many devices (processes) train together",
    "gradient_clip_val": "gradients clipped to this norm; 0 or null: no clipping",
}
# model.context_window is the one key of the window: the DataModule is handed it, never configured with it.
DATA_SET_BY_TRAIN = ("tokenizer", "corpus", "context_window")


# ---------------------------------------------------------------------------- values


def check_model(model: DictConfig) -> None:
    """The model config's own checks (kind, options, sizes, heads dividing the width), without building it."""
    from src.model import model_config

    model_config(OmegaConf.to_container(model, resolve=True), vocab_size=2)


def check_optimizer(opt: DictConfig) -> None:
    """optimizer.<key>'s names (the optimizer's limits are its settings' own, src/training/optim.py)."""
    name = settings(opt).name
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


# The values Lightning's Trainer documents for `precision` (lightning.ai, Trainer, precision).
PRECISIONS = ("32-true", "bf16-mixed", "16-mixed", "64-true", "bf16-true", "16-true", "32", "16", "bf16", "64")
PRECISIONS += ("transformer-engine", "transformer-engine-float16")


def trainer_refuses(key: str, value: Any, takes: str) -> NoReturn:
    """A value Lightning's Trainer documents it does not take (its own error names no key)."""
    raise ConfigError(f"trainer.{key}={typed(value)}: Trainer refuses it: {key} takes {takes}")


def devices_taken(devices: Any) -> bool:
    """trainer.devices as the Trainer documents it: a positive number, -1 or auto (all), device indices."""
    if rules.is_int(devices) or (isinstance(devices, str) and re.fullmatch(r"-?\d+", devices.strip())):
        return int(devices) > 0 or int(devices) == -1
    if isinstance(devices, str):
        return devices == "auto" or re.fullmatch(r"\s*\d+\s*(,\s*\d+\s*)*,?\s*", devices) is not None
    if isinstance(devices, ListConfig | list):
        return len(devices) > 0 and all(rules.is_int(i) and i >= 0 for i in devices)
    return False


def check_trainer(trainer: DictConfig) -> None:
    if not devices_taken(trainer.devices):
        trainer_refuses(
            "devices", trainer.devices, "a positive number, -1 or auto for all, or device indices ([0,1] or '0,')"
        )
    if trainer.precision is not None and str(trainer.precision) not in PRECISIONS:
        trainer_refuses("precision", trainer.precision, ", ".join(PRECISIONS))
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
    every = trainer.get("check_val_every_n_epoch")
    if every is not None:  # 0 divided by zero inside Lightning
        rules.positive_int("trainer.check_val_every_n_epoch", every, "or null to validate by steps")
    profiler = trainer.get("profiler")
    if not (profiler is None or isinstance(profiler, DictConfig) or profiler in ("simple", "advanced", "pytorch")):
        rules.refuse("trainer.profiler", profiler, "null, simple, advanced or pytorch", "or use debug=profiler")
    clip = trainer.gradient_clip_val
    if clip is not None:
        rules.finite("trainer.gradient_clip_val", clip, 0.0, "a finite number >= 0 (0 or null turns clipping off)")
    endless = "training batches are an endless stream with no epoch to limit; set trainer.max_steps instead"
    if trainer.limit_train_batches not in (None, 1.0):
        rules.refuse("trainer.limit_train_batches", trainer.limit_train_batches, "null", endless)
    kept = "every run keeps checkpoints/best.ckpt and last.ckpt (debug=fast_dev_run is the run that saves none)"
    if trainer.enable_checkpointing is False:
        rules.refuse("trainer.enable_checkpointing", False, "true", kept)


def check_precision(cfg: DictConfig) -> None:
    """fp16 with a fused AdamW would clip gradients still scaled by 2^16: the fused step unscales
    them after our clipping (Lightning's own clipping, which ours replaces, refuses the pair). On the
    CPU Lightning trains 16-mixed as bf16-mixed, without a scaler."""
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
    check_optimizer(cfg.optimizer)
    check_trainer(cfg.trainer)
    check_precision(cfg)
    s = cfg.sample
    rules.sampling("sample.", s.max_new_tokens, s.temperature, s.top_k, s.top_p)
    rules.sample_fits("sample.max_new_tokens", s.max_new_tokens)
    checkpoint = cfg.callbacks.get("model_checkpoint") if cfg.callbacks is not None else None
    if checkpoint is not None and "monitor" in checkpoint:
        rules.choice("callbacks.model_checkpoint.monitor", checkpoint.monitor, rules.VAL_METRICS)
    heads = (cfg.get("callbacks") or {}).get("head_scores")
    if heads is not None and cfg.model.context_window < 4:
        raise ConfigError(
            f"callbacks.head_scores needs model.context_window >= 4 (its probe is a string written twice), "
            f"got {cfg.model.context_window}: widen the window, or callbacks.head_scores=null"
        )


# ---------------------------------------------------------------------------- --help
# hydra.help.template is ${command_help:<command>}: each key's default from the config Hydra
# composed, its line from its schema field (metadata["help"]).

CONFIG_DIR = Path(__file__).resolve().parents[2] / "conf"
# The keys people change most, as `--help` lists them; a command not named here lists all its own keys.
COMMON_KEYS = {
    "train": (
        "model.num_heads model.embedding_dim model.context_window model.num_layers model.positional model.dropout "
        "model.norm model.activation data.batch_size data.path data.val_tokens data.sampling optimizer.lr "
        "optimizer.warmup_steps trainer.max_steps trainer.val_check_interval trainer.log_every_n_steps seed "
        "ckpt_path finetune sample.prompt explorer"
    ).split(),
}


def key_line(cfg: DictConfig, name: str) -> str:
    """A key's one line: metadata["help"] of its field in the schema of the node that holds it."""
    parent, _, last = name.rpartition(".")
    node = OmegaConf.select(cfg, parent) if parent else cfg
    schema = OmegaConf.get_type(node)
    lines = {f.name: f.metadata.get("help", "") for f in dataclasses.fields(schema)} if schema else {}
    return lines.get(last, "")


def typed(value: Any) -> str:
    """A value as the command line takes it: null, true, 0.002, [0.9,0.99], 'quoted with\\n'."""
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(typed(v) for v in value) + "]"
    text = str(value)
    if isinstance(value, str) and any(c in text for c in " \n,'\""):
        return "'" + text.replace("\n", "\\n").replace("'", "\\'") + "'"
    return text


def option_line(group: str, option: str) -> str:
    """The first sentence of an option's YAML file's opening comment: where the option says what it is."""
    header = []
    for line in (CONFIG_DIR / group / f"{option}.yaml").read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        if not line.startswith("# @package"):
            header.append(line.lstrip("#").strip())
    match = re.match(r"(.+?(?<!e\.g)(?<!i\.e)[.!?])(\s|$)", " ".join(header))
    return match.group(1) if match else " ".join(header)


def options(group: str) -> list[str]:
    """A config group's options, as a user chooses them (the schemas are not options)."""
    return sorted(p.stem for p in (CONFIG_DIR / group).glob("*.yaml"))


def command_help(config_name: str, *, _root_: DictConfig) -> str:
    """The whole --help text of one command, from the config Hydra composed for it (_root_)."""
    width = min(shutil.get_terminal_size((100, 24)).columns, 120)
    out = [f"python -m src.{config_name} [key=value ...] [-m]", "", textwrap.fill(option_line(".", config_name), width)]

    def row(left: str, text: str, pad: int) -> list[str]:
        wrapped = textwrap.wrap(text, max(width - pad - 4, 30)) or [""]
        return [f"  {left:<{pad}}  {wrapped[0]}"] + [" " * (pad + 4) + more for more in wrapped[1:]]

    choices = dict(reversed(list(_root_.hydra.runtime.choices.items())))  # in the defaults list's order
    groups = {g: d for g, d in choices.items() if not g.startswith("hydra") and options(g) != [d]}
    groups |= {"hydra/launcher": None} if config_name == "train" else {}  # Hydra's group this project gives options
    if groups:
        out += ["", "Config groups, one option each (group=option; * the default):"]
        pad = max(len(f"{g}={o}") for g in groups for o in options(g)) + 2
        for group, default in groups.items():
            for option in options(group):
                out += row(f"{group}={option} {'*' if option == default else ' '}", option_line(group, option), pad)
    names = COMMON_KEYS.get(config_name) or [k for k in _root_ if k not in ("hydra", "paths")]
    shown = {
        name: typed(OmegaConf.to_container(OmegaConf.create({"v": OmegaConf.select(_root_, name)}))["v"])
        for name in names
    }
    common = config_name in COMMON_KEYS
    out += ["", ("Common keys" if common else "Keys") + " and their defaults (key=value on the command line):"]
    pad = min(max(len(f"{name}={value}") for name, value in shown.items()), 34)
    for name, value in shown.items():
        left = f"{name}={value}"
        out += (
            ([f"  {left}"] + row("", key_line(_root_, name), pad))
            if len(left) > pad
            else row(left, key_line(_root_, name), pad)
        )
    out += ["", f"Every key, with the overrides applied:  python -m src.{config_name} [key=value ...] --cfg job"]
    if common:
        out.append("Each key's line is its schema field's (src/run/config.py, src/model/, src/training/optim.py)")
    out.append(f"Hydra's own flags (--cfg, --info, -m ...):  python -m src.{config_name} --hydra-help")
    return "\n".join(out) + "\n"
