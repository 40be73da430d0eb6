"""Optimizers and the learning-rate schedule: AdamW (or the notes' plain SGD, or Muon), warmup + cosine.

AdamW, SGD and Muon below are each optimizer's settings with their defaults, written once: the
config's schema is these classes (src/run/config.py), conf/optimizer/*.yaml only chooses one, and a
config that leaves a key out (a test, a benchmark) gets the same default here.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from src.model.checks import setting
from src.model.layers import TokenAndPositionEmbedding
from src.rules import ConfigError

HEADS = ("W_vocab", "W_out")  # the output layers: AdamW's under Muon, as in the reference implementations


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


def parameter_groups(model: nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """Weight decay on the weight matrices only: never on biases, norm gains or embeddings."""
    embeddings = {id(p) for m in model.modules() if isinstance(m, TokenAndPositionEmbedding) for p in m.parameters()}
    embeddings |= {id(p) for name, p in model.named_parameters() if name.endswith("E_V")}  # value embeddings
    decay, no_decay = [], []
    for p in model.parameters():
        (decay if p.dim() >= 2 and id(p) not in embeddings else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def muon_groups(model: nn.Module, opt: Muon) -> list[dict[str, Any]]:
    """Muon for the hidden weight matrices (W_Q, W_K, W_V, W_O, W_1, W_2, W_3); AdamW, without
    decay, for the embeddings (E, E_V, learned positions), the head, gains and biases."""
    hidden, rest = [], []
    for name, p in model.named_parameters():
        last = name.rsplit(".", 1)[-1]
        (hidden if p.dim() == 2 and last.startswith("W_") and last not in HEADS else rest).append(p)
    return [
        {
            "params": hidden,
            "muon": True,
            "lr": opt.lr,
            "weight_decay": opt.weight_decay,
            "momentum": opt.momentum,
            "nesterov": opt.nesterov,
            "ns_steps": opt.ns_steps,
            "ns_dtype": opt.ns_dtype,
        },
        {"params": rest, "muon": False, "lr": opt.adam_lr, "weight_decay": 0.0, "betas": tuple(opt.betas)},
    ]


def group_rates(opt: Settings) -> list[tuple[float, float]]:
    """(base learning rate, weight decay) of each parameter group, in the order build_optimizer makes them."""
    if isinstance(opt, Muon):
        return [(opt.lr, opt.weight_decay), (opt.adam_lr, 0.0)]
    return [(opt.lr, opt.weight_decay), (opt.lr, 0.0)]


@dataclass
class WarmupCosine:
    """Multiplier of the base learning rate at optimizer step `step`.

    Linear warmup over `warmup_steps`, then a cosine from 1 down to `min_ratio` at
    `decay_steps`, then flat. A callable object (not a lambda) so LambdaLR saves its state.
    """

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
    if isinstance(opt, Muon):
        from src.training.muon import MuonWithAdamW  # optimizer=muon only

        return MuonWithAdamW(muon_groups(model, opt))
    groups = parameter_groups(model, opt.weight_decay)
    if isinstance(opt, AdamW):
        return torch.optim.AdamW(groups, lr=opt.lr, betas=tuple(opt.betas), fused=opt.fused or None)
    return torch.optim.SGD(groups, lr=opt.lr, momentum=opt.momentum)


def schedule_shape(opt: Settings, decay_steps: int) -> WarmupCosine:
    min_lr = opt.lr if opt.min_lr is None else opt.min_lr
    return WarmupCosine(opt.warmup_steps, decay_steps, min_lr / opt.lr)


def build_schedule(optimizer: torch.optim.Optimizer, cfg: Mapping[str, Any]) -> torch.optim.lr_scheduler.LambdaLR:
    return torch.optim.lr_scheduler.LambdaLR(optimizer, schedule_shape(settings(cfg), cfg["decay_steps"]))


def apply_settings(
    optimizer: torch.optim.Optimizer, schedule: torch.optim.lr_scheduler.LambdaLR, cfg: Mapping[str, Any]
) -> None:
    """Set rate, schedule and decay from cfg on an optimizer whose state a checkpoint may have restored.

    Resuming restores the saved param groups and schedule, which would silently keep the old
    settings: the ones typed now win, and the cosine is planned to cfg["decay_steps"].
    """
    opt = settings(cfg)
    shape = schedule_shape(opt, cfg["decay_steps"])
    rates = group_rates(opt)
    schedule.lr_lambdas = [shape] * len(optimizer.param_groups)
    schedule.base_lrs = [base for base, _ in rates]
    for group, (base, decay) in zip(optimizer.param_groups, rates, strict=True):
        group["lr"] = base * shape(schedule.last_epoch)
        group["initial_lr"] = base
        group["weight_decay"] = decay
        if isinstance(opt, (AdamW, Muon)) and not group.get("muon"):
            group["betas"] = tuple(opt.betas)
        if isinstance(opt, SGD) or (isinstance(opt, Muon) and group.get("muon")):
            group["momentum"] = opt.momentum
