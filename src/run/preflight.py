"""What a run checks before it starts: `plan(cfg)` checks the values, the text, the checkpoint it
resumes and the machine; `part()` builds each part once, a class's refusal said in one line naming the key."""

from __future__ import annotations

import copy
import dataclasses
import errno
import importlib
import inspect
import logging
import os
import re
import shutil
import sys
import tempfile
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import lightning as L
import torch
from hydra.errors import InstantiationException
from hydra.utils import instantiate
from omegaconf import DictConfig, ListConfig, OmegaConf, open_dict

from src import rules
from src.data.corpus import first_line, resolve_corpus
from src.data.datamodule import require_two_characters, split_lengths
from src.data.token_cache import EncodedCorpus, open_corpus
from src.data.tokenizer import CharTokenizer, show_characters
from src.model import build_model, parameters_of
from src.model.checks import InvalidModelConfig
from src.rules import ConfigError, of_type, one_line, physical_memory, unknown_key, window_fits
from src.run.config import PRIMITIVES, SampleSchema, SweepSchema, TrainerOwn, TrainSchema, typed
from src.training import flops
from src.training.bands import config_key
from src.training.callbacks import AtomicCheckpointIO, what_is_kept
from src.training.optim import OPTIMIZERS, settings

PROMPTED_CALLBACKS = ("sample_text", "attention_maps", "head_scores")
TRAINER_OWN = {f.name for f in dataclasses.fields(TrainerOwn)}  # train reads them; the Trainer never sees them


@dataclass
class Plan:
    """What the run takes from the checks: the DataModule maps `corpus` (encoded with `tokenizer`)."""

    tokenizer: CharTokenizer
    resume: Path | None
    prompts: dict[str, str]  # "sample" and each prompted callback -> the prompt it uses
    corpus: EncodedCorpus
    datamodule: Any  # the run's TextDataModule, not yet set up
    budget: flops.Budget | None = None  # trainer.flops as steps
    settled: dict[str, Any] = dataclasses.field(default_factory=dict)  # keys the budget set: key -> value


def settle(cfg: DictConfig, settled: dict[str, Any]) -> None:
    """Write into cfg the values the plan settled (trainer.max_steps from trainer.flops), so that every
    reader of cfg (TensorBoard's hparams, a resume's checks, the record) sees what the run does."""
    for key, value in settled.items():
        OmegaConf.update(cfg, key, value, merge=False)


def world_size(trainer_cfg: DictConfig) -> int:
    """The processes that train together (devices x nodes), as the Trainer will count them."""
    devices = trainer_cfg.devices
    if isinstance(devices, ListConfig | list):
        count = len(devices)
    elif isinstance(devices, str) and "," in devices:
        count = len([i for i in devices.split(",") if i.strip()])
    elif devices in ("auto", -1, "-1"):
        count = max(1, torch.cuda.device_count()) if training_device(trainer_cfg) == "cuda" else 1
    else:
        count = int(devices)
    return count * int(trainer_cfg.get("num_nodes") or 1)


def plan_budget(cfg: DictConfig, vocab_size: int, train_tokens: int) -> flops.Budget:
    """trainer.flops as optimizer steps of this model (built on the meta device, counted) and batch."""
    with torch.device("meta"):
        model = build_model(OmegaConf.to_container(cfg.model, resolve=True), vocab_size)
    T = cfg.model.context_window
    per_step = cfg.data.batch_size * T * cfg.trainer.accumulate_grad_batches * world_size(cfg.trainer)
    return flops.budget(cfg.trainer.flops, flops.training_flops_per_token(model, T), per_step, train_tokens)


def open_text(data: DictConfig) -> EncodedCorpus:
    """The text's token cache, mapped (encoded now if this is its first run)."""
    path = resolve_corpus(data.path, data.cache_dir, data.url, data.sha256)
    encoded = open_corpus(path, data.cache_dir)
    require_two_characters(encoded.vocab, path)
    return encoded


def resolve_prompt(key: str, prompt: str | None, tokenizer: CharTokenizer, default: str) -> str:
    """A prompt as typed (`\\n` is a new line), or `default` if null; every character must be known."""
    if prompt is None:
        return default
    if not isinstance(prompt, str):
        raise ConfigError(f"{key} must be text, got {prompt!r}: quote it, e.g. {key}=\"'{prompt}'\"")
    prompt = prompt.replace("\\n", "\n")
    if not prompt:
        raise ConfigError(f"{key} is empty: give at least one character, or {key}=null for the text's opening")
    unknown = tokenizer.unknown_characters(prompt)
    if unknown:
        raise ConfigError(
            f"{key} has {len(unknown)} character(s) not in the vocabulary of the training text "
            f"({show_characters(unknown)}): "
            f"use only characters of the text, or {key}=null for the text's own opening"
        )
    return prompt


def resolve_prompts(cfg: DictConfig, tokenizer: CharTokenizer, text: str) -> dict[str, str]:
    """Each prompt as its sample will use it; `text`: the opening of the training text, for defaults."""
    prompts = {"sample": resolve_prompt("sample.prompt", cfg.sample.prompt, tokenizer, first_line(text))}
    for name in PROMPTED_CALLBACKS:
        callback = cfg.callbacks.get(name)
        if callback is not None:
            default = {"sample_text": first_line(text), "head_scores": prompts["sample"]}.get(name, text[:32])
            prompts[name] = resolve_prompt(f"callbacks.{name}.prompt", callback.get("prompt"), tokenizer, default)
    return prompts


def parameters(model: DictConfig, vocab_size: int) -> int:
    """The model's exact parameter count (src/model's parameters_of: built on the meta device)."""
    return parameters_of(OmegaConf.to_container(model, resolve=True), vocab_size)


def training_device(trainer_cfg: DictConfig) -> str | None:
    """cuda, mps or cpu, as Lightning picks for trainer.accelerator here; None: one this machine lacks."""
    accelerator = str(trainer_cfg.accelerator)
    if accelerator in ("gpu", "cuda", "auto") and torch.cuda.is_available():
        return "cuda"
    if accelerator in ("gpu", "mps", "auto") and torch.backends.mps.is_available():
        return "mps"
    return "cpu" if accelerator in ("cpu", "auto") else None


def check_memory(cfg: DictConfig, vocab_size: int) -> None:
    """Refuse a model or batch that could never fit the training device's memory, before trying: fp32
    weights, gradients and AdamW's two moments (16 bytes per parameter) plus the activations autograd
    keeps (about 20 numbers per layer, width and token), against the smallest GPU it uses (DDP: a
    replica on each), else the machine's RAM."""
    m, B = cfg.model, cfg.data.batch_size
    d, T, layers = m.embedding_dim, m.context_window, m.get("num_layers", 1)
    activations = B * T * (layers * (20 * d + 2 * m.num_heads * T) + 2 * vocab_size)
    needed = 16.0 * parameters(m, vocab_size) + 4.0 * activations
    available, where = float(physical_memory()), "this machine's"
    if training_device(cfg.trainer) == "cuda":
        devices = cfg.trainer.devices
        indices = list(devices) if isinstance(devices, (list, ListConfig)) else range(torch.cuda.device_count())
        smallest = min(indices, key=lambda i: torch.cuda.get_device_properties(i).total_memory)
        properties = torch.cuda.get_device_properties(smallest)
        available, where = float(properties.total_memory), f"GPU {smallest}'s ({properties.name})"
    if needed > available:
        keys = [k for k in ("num_layers", "embedding_dim", "mlp_ratio", "context_window") if k in cfg.model]
        sizes = [f"model.{k}={cfg.model[k]}" for k in keys] + [f"data.batch_size={cfg.data.batch_size}"]
        raise ConfigError(
            f"{', '.join(sizes)} need about {needed / 2**30:,.0f} GiB to train, more than {where} "
            f"{available / 2**30:,.0f} GiB: choose a smaller model or batch"
        )


def cpu_has_bfloat16() -> bool:
    """Whether this CPU multiplies bfloat16 matrices in hardware (AVX512-BF16 or AMX), as oneDNN sees it.

    PyTorch has no public way to ask: torch.ops.mkldnn._is_mkldnn_bf16_supported is private, so it
    is reached here only, and tests/run/test_slow_bfloat16.py fails if it goes."""
    return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


def warn_slow_bfloat16(cfg: DictConfig) -> None:
    """On a CPU without bfloat16 instructions PyTorch emulates bfloat16 matmuls, tens of times slower
    than float32 (BENCHMARKS.md, "Machine"): say so once, before the run, and name the fix."""
    precision = str(cfg.trainer.precision)
    slow = []  # (the setting asked for, its float32 fix)
    if precision.startswith("bf16") or precision in ("16", "16-mixed"):  # 16-mixed is bf16 on a CPU
        slow.append((f"trainer.precision={precision}", "trainer.precision=32-true"))
    if cfg.optimizer.get("ns_dtype") == "bfloat16":
        slow.append(("optimizer.ns_dtype=bfloat16", "optimizer.ns_dtype=float32"))
    if not slow or training_device(cfg.trainer) != "cpu" or cpu_has_bfloat16() or int(os.environ.get("RANK", 0)):
        return
    asked, fixes = zip(*slow, strict=True)
    print(
        f"warning: {' and '.join(asked)} on a CPU without bfloat16 instructions (no AVX512-BF16 or AMX): "
        f"PyTorch emulates its bfloat16 matmuls, tens of times slower than float32; "
        f"for speed use {' and '.join(fixes)}",
        file=sys.stderr,
    )


def check_accelerator(trainer_cfg: DictConfig) -> None:
    """The accelerator and device count must exist here (Lightning would stop with a traceback)."""
    device = training_device(trainer_cfg)
    accelerator = trainer_cfg.accelerator
    if device is None and accelerator in ("gpu", "cuda"):
        raise ConfigError(
            f"trainer.accelerator={accelerator} (trainer=gpu, trainer=ddp) asks for a GPU but none is available: "
            f"use trainer=cpu, trainer=ddp_cpu for data parallel on the CPU, or trainer=default, which takes a "
            f"GPU only when there is one"
        )
    if device is None:  # Lightning's own refusal (mps, tpu, ...) names neither the key nor the fix
        usable = ["auto", "cpu", *(["gpu"] if torch.cuda.is_available() else [])]
        usable += ["mps"] if torch.backends.mps.is_available() else []
        raise ConfigError(
            f"trainer.accelerator={accelerator} is not available on this machine: use one of {', '.join(usable)}"
        )
    check_devices(trainer_cfg.devices, device)


def check_devices(devices: Any, device: str) -> None:
    """trainer.devices as the Trainer documents it (a positive number, -1 or auto for all, device
    indices as [0,1] or '0,1'), and no more devices than this machine has."""
    if isinstance(devices, str) and re.fullmatch(r"\s*-?\d+\s*", devices):
        devices = int(devices)
    elif isinstance(devices, str) and re.fullmatch(r"\s*\d+\s*(,\s*\d+\s*)*,?\s*", devices):
        devices = [int(i) for i in devices.split(",") if i.strip()]
    listed = isinstance(devices, ListConfig | list)
    if not (
        devices in ("auto", -1)
        or (rules.is_int(devices) and devices > 0)
        or (listed and len(devices) > 0 and all(rules.is_int(i) and i >= 0 for i in devices))
    ):
        trainer_refuses("devices", devices, "a positive number, -1 or auto for all, or device indices ([0,1] or '0,')")
    count = {"cuda": torch.cuda.device_count(), "mps": 1}.get(device)
    if count is None or devices in ("auto", -1):
        return
    if listed and any(i >= count for i in devices):
        raise ConfigError(
            f"trainer.devices={list(devices)} names a {device} device this machine lacks: it has {count} "
            f"({', '.join(map(str, range(count)))}); name those, or trainer.devices=-1 for all"
        )
    if not listed and devices > count:
        raise ConfigError(
            f"trainer.devices={devices} asks for {devices} {device} devices, but this machine has {count}: "
            f"use trainer.devices={count} (or -1 for all of them)"
        )


# ---------------------------------------------------------------------------- the values


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


def check_trainer(trainer: DictConfig) -> None:
    if trainer.precision is not None and str(trainer.precision) not in PRECISIONS:
        trainer_refuses("precision", trainer.precision, ", ".join(PRECISIONS))
    rules.positive_int("trainer.max_steps", trainer.max_steps, "the number of optimizer steps to train")
    if trainer.get("flops") is not None:
        rules.finite("trainer.flops", trainer.flops, 0.0, "a positive number of FLOPs, e.g. 1e13, or null", strict=True)
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
    from src.model import model_config  # the model's own checks (kind, options, sizes), without building it

    model_config(OmegaConf.to_container(cfg.model, resolve=True), vocab_size=2)
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


# ---------------------------------------------------------------------------- the parts of a run

HYDRA_KEYS = ("_target_", "_partial_", "_recursive_", "_convert_", "_args_")


def part(key: str, spec: Any, **given: Any) -> Any:
    """hydra's instantiate(spec, **given), with what the class refuses said in one line naming `key`."""
    target = spec.get("_target_") if isinstance(spec, DictConfig) else None
    if not isinstance(target, str):
        raise ConfigError(f"{key} has no _target_: give the class to build as {key}._target_=..., or set {key}=null")
    module, _, name = target.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module), name)
    except Exception as err:  # an import error of any kind: the path is what the user typed
        raise ConfigError(
            f"{key}._target_={target} cannot be imported ({one_line(err)}): check the class path"
        ) from None
    parameters = inspect.signature(cls).parameters
    check_types(key, spec, cls, given)
    if not any(p.kind == p.VAR_KEYWORD for p in parameters.values()):
        options = [name for name in parameters if name not in given]
        unknown = [k for k in spec if k not in HYDRA_KEYS and k not in parameters]
        if unknown:
            unknown_key(f"{key}.{unknown[0]}", cls.__name__, options)
    try:
        return instantiate(spec, **given)
    except InstantiationException as err:
        cause = err.__cause__ or err
        message = one_line(cause)
        if isinstance(cause, InvalidModelConfig):  # a rule's one line, the model's or the run's
            if message.startswith(key):
                raise cause from None
            if re.match(r"\w+", message)[0] in spec:  # the class named its argument
                raise ConfigError(f"{key}.{message}") from None
        raise ConfigError(f"{key}: {cls.__name__} refuses it: {message}") from None


def check_types(key: str, spec: DictConfig, cls: type, given: dict[str, Any]) -> None:
    """The values of a config without a schema (a callback's, the logger's) against the types the
    class's constructor declares: `filename=1` is refused here, not at the first save."""
    try:
        hints = typing.get_type_hints(cls.__init__)
    except Exception:  # annotations that do not resolve: the constructor is left to check
        return
    for name in spec:
        if name in HYDRA_KEYS or name in given or name not in hints:
            continue
        hint = hints[name]
        union = typing.get_origin(hint) in (typing.Union, types.UnionType)
        args = typing.get_args(hint) if union else (hint,)
        kinds = tuple(a for a in args if a is not type(None))
        if kinds and all(k in PRIMITIVES for k in kinds):  # e.g. fast_dev_run: int | bool
            of_type(f"{key}.{name}", spec[name], kinds, optional=len(kinds) < len(args))


def build_callbacks(cfg: DictConfig, prompts: dict[str, str], progress_bar: bool, text_sha256: str) -> list[L.Callback]:
    """The configured callbacks: of the progress bar and progress lines both built (keys checked), one kept.
    text_sha256: the text's, which a reference band is made for."""
    callbacks = []
    for name, spec in cfg.callbacks.items():
        if spec is None:
            continue
        extra = {"prompt": prompts[name]} if name in prompts else {}
        if name == "band":
            extra = {"run_key": config_key(cfg, text_sha256)}
        callback = part(f"callbacks.{name}", spec, **extra)
        if not (name == "progress_bar" and not progress_bar) and not (name == "progress_log" and progress_bar):
            callbacks.append(callback)
    return callbacks


def without_own_keys(trainer_cfg: DictConfig) -> DictConfig:
    """The Trainer's keys of trainer_cfg (a copy, its interpolations still resolving in the whole config)."""
    spec = copy.deepcopy(trainer_cfg)
    with open_dict(spec):
        for key in TRAINER_OWN:
            spec.pop(key, None)
    return spec


def build_trainer(cfg: DictConfig, callbacks: list[L.Callback], logger: Any, progress_bar: bool) -> L.Trainer:
    """The Trainer, without Lightning's "GPU available: ..." lines (built before Hydra's logging is set)."""
    quiet = logging.getLogger("lightning.pytorch.utilities.rank_zero")
    level = quiet.level
    quiet.setLevel(max(level, logging.WARNING))
    try:
        return part(
            "trainer",
            without_own_keys(cfg.trainer),
            callbacks=callbacks,
            logger=logger,
            enable_progress_bar=progress_bar,
            plugins=[AtomicCheckpointIO()],
        )
    finally:
        quiet.setLevel(level)


# A key that sets others, and the keys it sets: typed together on one command line they are refused (a
# preset's values give way to the dial; a command line that types both means two things).
SETS = {
    "model.scale": ("model.num_layers", "model.embedding_dim", "model.num_heads"),
    "trainer.flops": ("trainer.max_steps",),
}


def check_typed_together(overrides: list[str]) -> None:
    """Refuse `model.scale=3 model.embedding_dim=64` (or trainer.flops with trainer.max_steps) on one line."""
    typed = {o.lstrip("+~").split("=", 1)[0]: o for o in overrides if "=" in o}
    for key, sets in SETS.items():
        both = [typed[k] for k in sets if k in typed]
        if key in typed and both:
            raise ConfigError(
                f"{typed[key]} sets {', '.join(sets)} itself, and {' '.join(both)} typed too: keep one or the other"
            )


def scaled_model(cfg: DictConfig) -> dict[str, Any]:
    """The sizes model.scale sets (src/model/gpt.py's rule, read off the model's config), as settled keys."""
    if cfg.model.get("scale") is None:
        return {}
    from src.model import model_config

    model = model_config(OmegaConf.to_container(cfg.model, resolve=True), vocab_size=2)
    return {f"model.{key}": getattr(model, key) for key in ("num_layers", "embedding_dim", "num_heads")}


def plan(cfg: DictConfig) -> Plan:
    """Check a composed train config against everything it will meet; raise ConfigError naming the fix."""
    check_values(cfg)
    settle(cfg, scaled := scaled_model(cfg))  # the sizes the memory and disk checks, and the budget, read
    check_accelerator(cfg.trainer)
    # data.*: the DataModule's own checks, before any text is read; it gets the one window length (the model's)
    T = cfg.model.context_window
    datamodule = part("data", cfg.data, context_window=T)
    warn_slow_bfloat16(cfg)
    resume, checkpoint = None, None
    if cfg.ckpt_path is not None:  # before the text: a missing or broken checkpoint is the first thing to say
        from src.training.checkpoint import find_checkpoint, read_checkpoint  # only a resumed run reads one

        resume = find_checkpoint(cfg.ckpt_path, cfg.paths.log_dir, prefer="last")
        checkpoint = read_checkpoint(resume)
    corpus = open_text(cfg.data)
    test = cfg.data.test_fraction
    splits = split_lengths(corpus.num_tokens, cfg.data.val_fraction, test)
    budget, settled = None, dict(scaled)
    if cfg.trainer.get("flops") is not None:  # before a resume is checked against trainer.max_steps
        budget = plan_budget(cfg, len(corpus.vocab), splits["train"])
        settle(cfg, {"trainer.max_steps": budget.steps})
    if checkpoint is None:
        tokenizer = CharTokenizer(corpus.vocab)
    else:
        from src.run.resume import check_resume  # the checkpoint against the config and the text

        tokenizer = check_resume(checkpoint, resume, cfg, corpus)
    if tokenizer.vocab != corpus.vocab:  # a checkpoint's larger vocabulary: the text encoded with its ids
        corpus = open_corpus(corpus.source, cfg.data.cache_dir, tokenizer.vocab)
        budget = plan_budget(cfg, tokenizer.vocab_size, splits["train"]) if budget is not None else None
    datamodule.tokenizer, datamodule.corpus = tokenizer, corpus  # what the plan read, not read again
    for split, n in splits.items():
        if split != "test" or test > 0:
            name = {"train": "training", "val": "validation"}.get(split, split)
            window_fits(name, n, T, (str(corpus.source), corpus.num_tokens))
    check_memory(cfg, tokenizer.vocab_size)
    if budget is not None:
        settled["trainer.max_steps"] = budget.steps
    settle(cfg, settled)
    with open(corpus.source, "rb") as f:  # the text's opening: the prompts' default
        prompts = resolve_prompts(cfg, tokenizer, f.read(1024).decode("utf-8-sig", errors="ignore")[:256])
    return Plan(tokenizer, resume, prompts, corpus, datamodule, budget, settled)


# ---------------------------------------------------------------------------- the run directory


CHECKPOINT_EXTRA = 32 * 2**10  # a checkpoint's tokenizer, hyperparameters and loop state
RUN_FILES = 2 * 2**20  # TensorBoard events, train.log, .hydra/, result.json: a few hundred KB at the defaults


def checkpoint_bytes(cfg: DictConfig, vocab_size: int) -> int:
    """One checkpoint's size: fp32 weights and the optimizer's state (AdamW: two moments; SGD: a
    momentum buffer when it has momentum). 8.4 MB at the defaults."""
    state = 2 if cfg.optimizer.name == "adamw" else int(bool(cfg.optimizer.get("momentum")))
    return 4 * (1 + state) * parameters(cfg.model, vocab_size) + CHECKPOINT_EXTRA


def disk_needed(cfg: DictConfig, vocab_size: int, run_dir: Path) -> int:
    """Bytes a run writes at most into run_dir beyond the checkpoints there: best.ckpt and last.ckpt,
    a third copy while one is replaced, the explorer page (~6 bytes per parameter) and RUN_FILES."""
    checkpoint = checkpoint_bytes(cfg, vocab_size)
    page = 6 * parameters(cfg.model, vocab_size) + 2**17 if cfg.get("explorer") else 0
    there = sum(f.stat().st_size for f in (run_dir / "checkpoints").glob("*.ckpt") if f.is_file())
    return max(0, 3 * checkpoint - there) + page + RUN_FILES


def megabytes(n: float) -> str:
    return f"{n / 1e6:,.1f} MB"


def check_run_dir(cfg: DictConfig, vocab_size: int, run_dir: str | Path, key: str) -> None:
    """Refuse a run_dir (`key` chooses it) whose nearest existing folder takes no new file (probed), or
    whose disk could not hold the run's checkpoints: before anything is written, not at the first save."""
    path = Path(run_dir).expanduser().absolute()
    existing = next(p for p in [path, *path.parents] if p.exists())
    try:
        if not existing.is_dir():
            raise NotADirectoryError(f"{existing} is a file")
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as err:
        raise ConfigError(
            f"cannot write the run to {path} ({err.strerror or err}): choose a writable {key}=..."
        ) from None
    needed, free = disk_needed(cfg, vocab_size, path), shutil.disk_usage(existing).free
    if needed > free:
        raise ConfigError(
            f"not enough free space for the run in {path}: it writes about {megabytes(needed)} (best.ckpt and "
            f"last.ckpt of {megabytes(checkpoint_bytes(cfg, vocab_size))} each, a third while one is replaced, "
            f"the explorer page, logs), and {megabytes(free)} are free there: free "
            f"{megabytes(needed - free)} or more, or choose another {key}=..."
        )


DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


def disk_full(cfg: DictConfig, vocab_size: int, run_dir: Path, err: OSError) -> str:
    """A disk found full mid-run, in one line: where, how much the run needs, and what is kept."""
    file = f": {err.filename}" if err.filename else ""
    needed, free = disk_needed(cfg, vocab_size, run_dir), shutil.disk_usage(run_dir).free
    return (
        f"the disk of {run_dir} is full ({err.strerror or err}{file}): the run needs about {megabytes(needed)} "
        f"more there and {megabytes(free)} are free; {what_is_kept(run_dir / 'checkpoints')} once there is room, "
        f"or choose another hydra.run.dir"
    )
