"""Optimizers and the learning-rate schedule: AdamW (or the notes' plain SGD, or Muon), warmup + cosine.
AdamW, SGD and Muon below hold each optimizer's settings and defaults, once: they are the config's schema."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from src import rules
from src.model.checks import setting
from src.model.layers import TokenAndPositionEmbedding
from src.rules import ConfigError

HEADS = ("W_vocab", "W_out")  # the output layers: AdamW's under Muon, as in the reference implementations


def check_limits(opt: AdamW | SGD | Muon) -> None:
    """The limits every optimizer's settings keep, checked as they are built; a refusal names optimizer.<key>."""
    rules.finite("optimizer.lr", opt.lr, 0.0, "a positive finite number", strict=True)
    if opt.min_lr is not None:
        rules.finite("optimizer.min_lr", opt.min_lr, 0.0, "a finite number >= 0")
    rules.finite("optimizer.weight_decay", opt.weight_decay, 0.0, "a finite number >= 0 (0 turns decay off)")
    rules.non_negative_int("optimizer.warmup_steps", opt.warmup_steps)
    if opt.decay_steps is not None:
        rules.positive_int("optimizer.decay_steps", opt.decay_steps, "or null for trainer.max_steps")
    betas = getattr(opt, "betas", None)
    if betas is not None and (len(betas) != 2 or not all(rules.is_number(b) and 0.0 <= b < 1.0 for b in betas)):
        rules.refuse("optimizer.betas", list(betas), "two numbers in [0, 1), e.g. [0.9,0.99]")
    if hasattr(opt, "momentum"):
        rules.finite("optimizer.momentum", opt.momentum, 0.0, "a finite number >= 0")


@dataclass
class AdamW:
    """AdamW with weight decay on the weight matrices only; linear warmup, then cosine decay to min_lr."""

    name: str = setting("adamw", "the optimizer, chosen with optimizer=<name>")
    lr: float = setting(2e-3, "the peak learning rate, reached after warmup_steps")
    betas: list[float] = field(
        default_factory=lambda: [0.9, 0.99], metadata={"help": "the decay rates of Adam's two moment averages"}
    )
    weight_decay: float = setting(0.1, "decoupled weight decay, on the weight matrices only")
    fused: bool = setting(True, "one fused kernel for the whole update")
    warmup_steps: int = setting(100, "steps of linear warmup from 0 to lr")
    min_lr: float = setting(2e-4, "the rate the cosine decays to")
    decay_steps: int | None = setting(None, "null: trainer.max_steps")

    def __post_init__(self) -> None:
        check_limits(self)


@dataclass
class SGD:
    """The notes' plain gradient descent: theta <- theta - lr * grad, at a constant rate by default."""

    name: str = setting("sgd", "the optimizer, chosen with optimizer=<name>")
    lr: float = setting(1e-3, "the learning rate")
    momentum: float = setting(0.0, "heavy-ball momentum; 0: plain gradient descent")
    weight_decay: float = setting(0.0, "weight decay, on the weight matrices only")
    warmup_steps: int = setting(0, "steps of linear warmup from 0 to lr")
    min_lr: float | None = setting(None, "null: lr, constant whatever lr is typed (sgd.yaml: ${optimizer.lr})")
    decay_steps: int | None = setting(None, "null: trainer.max_steps")

    def __post_init__(self) -> None:
        check_limits(self)


@dataclass
class Muon:
    """Muon (src/training/muon.py) for the hidden weight matrices, AdamW for the embeddings, the head,
    gains and biases; warmup + cosine as AdamW's, the same shape for both rates."""

    name: str = setting("muon", "the optimizer, chosen with optimizer=<name>")
    lr: float = setting(0.02, "Muon's rate, for the hidden weight matrices")
    momentum: float = setting(0.95, "Muon's momentum")
    nesterov: bool = setting(True, "Nesterov momentum")
    ns_steps: int = setting(5, "Newton-Schulz iterations that orthogonalise each update")
    ns_dtype: str = setting("float32", "or bfloat16: the Newton-Schulz iterations, faster on a CPU with bf16 matmuls")
    weight_decay: float = setting(0.0, "on the hidden weight matrices")
    adam_lr: float = setting(2e-3, "AdamW's rate, for the embeddings, the head, gains and biases")
    betas: list[float] = field(
        default_factory=lambda: [0.9, 0.99], metadata={"help": "the decay rates of AdamW's two moment averages"}
    )
    warmup_steps: int = setting(100, "steps of linear warmup from 0 to both rates")
    min_lr: float = setting(2e-3, "the schedule ends at min_lr / lr of both rates")
    decay_steps: int | None = setting(None, "null: trainer.max_steps")

    def __post_init__(self) -> None:
        check_limits(self)
        rules.finite("optimizer.adam_lr", self.adam_lr, 0.0, "a positive finite number", strict=True)
        rules.positive_int("optimizer.ns_steps", self.ns_steps, "Newton-Schulz iterations, e.g. 5")
        rules.choice("optimizer.ns_dtype", self.ns_dtype, ("float32", "bfloat16"))
        if not self.momentum < 1:
            rules.refuse("optimizer.momentum", self.momentum, "in [0, 1) for Muon", "e.g. 0.95")


Settings = AdamW | SGD | Muon
OPTIMIZERS: dict[str, type[Settings]] = {"adamw": AdamW, "sgd": SGD, "muon": Muon}


def settings(cfg: Mapping[str, Any]) -> Settings:
    """cfg (the config's optimizer node, or any dict naming one) with every key it leaves out at its default."""
    name = cfg["name"]
    if name not in OPTIMIZERS:
        raise ConfigError(
            f"optimizer.name must be one of adamw, sgd, muon, got {name!r}: choose it with optimizer=adamw"
        )
    known = {f.name for f in dataclasses.fields(OPTIMIZERS[name])}
    return OPTIMIZERS[name](**{k: v for k, v in cfg.items() if k in known})


def split_parameters(model: nn.Module, opt: Settings) -> tuple[list[nn.Parameter], list[nn.Parameter]]:
    """(the weight matrices that decay, the rest: biases, gains, embeddings). Under Muon the first are the
    hidden matrices (W_Q, W_K, W_V, W_O, W_1, W_2, W_3), and the head is with the rest."""
    first, rest = [], []
    if isinstance(opt, Muon):
        for name, p in model.named_parameters():
            last = name.rsplit(".", 1)[-1]
            (first if p.dim() == 2 and last.startswith("W_") and last not in HEADS else rest).append(p)
        return first, rest
    embeddings = {id(p) for m in model.modules() if isinstance(m, TokenAndPositionEmbedding) for p in m.parameters()}
    embeddings |= {id(p) for name, p in model.named_parameters() if name.endswith("E_V")}  # value embeddings
    for p in model.parameters():
        (first if p.dim() >= 2 and id(p) not in embeddings else rest).append(p)
    return first, rest


BASE_WIDTH = 128  # about the default model's width (120), where optimizer.lr was tuned: model.scale=8's


def hidden_lr_scale(model_cfg: Mapping[str, Any]) -> float:
    """AdamW's rate for the weight matrices under model.scale: lr x BASE_WIDTH / d (muP for Adam, Yang et
    al. 2022, table 3: an Adam update moves each entry by about lr, so a matrix's output moves ~ lr x
    fan_in; lr ~ 1/d keeps that step the same at every width). Embeddings, gains and biases keep lr (their
    fan_in does not grow). 1 without the dial: a rate typed for one model stays the rate it trains with."""
    scale = model_cfg.get("scale")
    return 1.0 if scale is None else BASE_WIDTH / model_cfg["embedding_dim"]


def group_settings(opt: Settings, hidden_scale: float = 1.0) -> list[dict[str, Any]]:
    """The settings of split_parameters' two groups: Muon's and AdamW's under Muon. hidden_scale multiplies
    AdamW's rate of the weight matrices (hidden_lr_scale); SGD's and Muon's rates keep (muP leaves plain
    SGD's hidden rate alone, and Muon's orthogonalised update has its size from its shape)."""
    if isinstance(opt, Muon):
        muon = {"lr": opt.lr, "weight_decay": opt.weight_decay, "momentum": opt.momentum, "nesterov": opt.nesterov}
        muon |= {"muon": True, "ns_steps": opt.ns_steps, "ns_dtype": opt.ns_dtype}
        return [muon, {"muon": False, "lr": opt.adam_lr, "weight_decay": 0.0, "betas": tuple(opt.betas)}]
    kind = {"betas": tuple(opt.betas)} if isinstance(opt, AdamW) else {"momentum": opt.momentum}
    matrices = opt.lr * (hidden_scale if isinstance(opt, AdamW) else 1.0)
    return [{"lr": matrices, "weight_decay": opt.weight_decay, **kind}, {"lr": opt.lr, "weight_decay": 0.0, **kind}]


@dataclass
class WarmupCosine:
    """The multiplier of the base learning rate at a step: linear warmup over `warmup_steps`, a cosine from 1
    to `min_ratio` at `decay_steps`, then flat. An object, not a lambda, so that LambdaLR saves its state."""

    warmup_steps: int
    decay_steps: int
    min_ratio: float

    def __call__(self, step: int) -> float:
        if step < self.warmup_steps:
            return (step + 1) / (self.warmup_steps + 1)
        if step >= self.decay_steps:
            return self.min_ratio
        progress = (step - self.warmup_steps) / max(1, self.decay_steps - self.warmup_steps)
        return self.min_ratio + 0.5 * (1.0 + math.cos(math.pi * progress)) * (1.0 - self.min_ratio)


def build_optimizer(model: nn.Module, cfg: Mapping[str, Any]) -> torch.optim.Optimizer:
    opt = settings(cfg)
    parameters, kept = split_parameters(model, opt), group_settings(opt, cfg.get("hidden_lr_scale", 1.0))
    groups = [{"params": params, **group} for params, group in zip(parameters, kept, strict=True)]
    if isinstance(opt, Muon):
        from src.training.muon import MuonWithAdamW  # optimizer=muon only

        return MuonWithAdamW(groups)
    if isinstance(opt, AdamW):
        return torch.optim.AdamW(groups, fused=opt.fused or None)
    return torch.optim.SGD(groups)


def schedule_shape(opt: Settings, decay_steps: int) -> WarmupCosine:
    min_lr = opt.lr if opt.min_lr is None else opt.min_lr
    return WarmupCosine(opt.warmup_steps, decay_steps, min_lr / opt.lr)


def build_schedule(optimizer: torch.optim.Optimizer, cfg: Mapping[str, Any]) -> torch.optim.lr_scheduler.LambdaLR:
    return torch.optim.lr_scheduler.LambdaLR(optimizer, schedule_shape(settings(cfg), cfg["decay_steps"]))


def apply_settings(
    optimizer: torch.optim.Optimizer, schedule: torch.optim.lr_scheduler.LambdaLR, cfg: Mapping[str, Any]
) -> None:
    """The settings typed now win over those a resumed checkpoint restored, and the cosine is planned to
    cfg["decay_steps"]."""
    opt = settings(cfg)
    shape = schedule_shape(opt, cfg["decay_steps"])
    kept = group_settings(opt, cfg.get("hidden_lr_scale", 1.0))
    schedule.lr_lambdas = [shape] * len(optimizer.param_groups)
    schedule.base_lrs = [group["lr"] for group in kept]
    for group, now in zip(optimizer.param_groups, kept, strict=True):
        group.update(now, initial_lr=now["lr"], lr=now["lr"] * shape(schedule.last_epoch))
