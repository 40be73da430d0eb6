"""train's config schemas, named first in each YAML file's defaults list: OmegaConf refuses unknown keys
and wrong types, naming the key. The model's, the data's and the Trainer's are read off the classes they
configure, so no list of keys is kept twice. `command_help` is every command's `--help` text."""

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
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf

from src.model.checks import setting
from src.model.gpt import GPTConfig
from src.model.seed_gpt import SeedGPTConfig
from src.run.rundir import PROJECT_ROOT
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
        fields.append((p.name, kind, default))
    fields += [(key, type(value), value) for key, value in extra.items()]
    described = [(n, k, field(default=d, metadata={"help": lines[n]} if n in lines else {})) for n, k, d in fields]
    return dataclasses.make_dataclass(name, described)


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
    store.store(group="trainer", name="trainer_schema", node=with_own_keys(trainer, TrainerOwn))


@dataclass
class TrainerOwn:
    """The trainer's keys that are this project's, not the Trainer's: read by train, never handed to it."""

    # Wins over trainer.max_steps (a preset's or typed): the start line says the steps it sets.
    flops: float | None = setting(None, "a compute budget: max_steps = flops / (FLOPs per token x tokens per step)")


def with_own_keys(schema: type, own: type) -> type:
    """`schema` (read off a class) with the fields of `own` added, each with its line."""
    hints = typing.get_type_hints(own)
    added = [(f.name, hints[f.name], field(default=f.default, metadata=f.metadata)) for f in dataclasses.fields(own)]
    return dataclasses.make_dataclass(schema.__name__, added, bases=(schema,))


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


# ---------------------------------------------------------------------------- --help
# hydra.help.template is ${command_help:<command>}: each key's default from the config Hydra
# composed, its line from its schema field (metadata["help"]).

CONFIG_DIR = PROJECT_ROOT / "conf"
# The keys people change most, as `--help` lists them; a command not named here lists all its own keys.
COMMON_KEYS = {
    "train": (
        "model.num_heads model.embedding_dim model.context_window model.num_layers model.positional model.dropout "
        "model.norm model.activation model.scale data.batch_size data.path data.val_tokens data.sampling optimizer.lr "
        "optimizer.warmup_steps trainer.max_steps trainer.flops trainer.val_check_interval "
        "trainer.log_every_n_steps seed "
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
        wrapped = textwrap.wrap(text, max(width - pad - 4, 30), break_on_hyphens=False) or [""]
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
