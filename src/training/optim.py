"""Optimizers and the learning-rate schedule: AdamW (or the notes' plain SGD, or Muon), warmup + cosine."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from src.model.layers import TokenAndPositionEmbedding
from src.run.rules import ConfigError
from src.training.muon import MuonWithAdamW

HEADS = ("W_vocab", "W_out")  # the output layers: AdamW's under Muon, as in the reference implementations


def parameter_groups(model: nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """Weight decay on the weight matrices only: never on biases, norm gains or embeddings."""
    embeddings = {id(p) for m in model.modules() if isinstance(m, TokenAndPositionEmbedding) for p in m.parameters()}
    embeddings |= {id(p) for name, p in model.named_parameters() if name.endswith("E_V")}  # value embeddings
    decay, no_decay = [], []
    for p in model.parameters():
        (decay if p.dim() >= 2 and id(p) not in embeddings else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def muon_groups(model: nn.Module, cfg: Mapping[str, Any]) -> list[dict[str, Any]]:
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
            "lr": cfg["lr"],
            "weight_decay": cfg.get("weight_decay", 0.0),
            "momentum": cfg.get("momentum", 0.95),
            "nesterov": cfg.get("nesterov", True),
            "ns_steps": cfg.get("ns_steps", 5),
        },
        {"params": rest, "muon": False, "lr": cfg["adam_lr"], "weight_decay": 0.0, "betas": tuple(cfg["betas"])},
    ]


def group_rates(cfg: Mapping[str, Any]) -> list[tuple[float, float]]:
    """(base learning rate, weight decay) of each parameter group, in the order build_optimizer makes them."""
    decay = cfg.get("weight_decay", 0.0)
    if cfg["name"] == "muon":
        return [(cfg["lr"], decay), (cfg["adam_lr"], 0.0)]
    return [(cfg["lr"], decay), (cfg["lr"], 0.0)]


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
    name, lr = cfg["name"], cfg["lr"]
    groups = parameter_groups(model, cfg.get("weight_decay", 0.0))
    if name == "adamw":
        fused = cfg.get("fused", True)
        return torch.optim.AdamW(groups, lr=lr, betas=tuple(cfg.get("betas", (0.9, 0.999))), fused=fused or None)
    if name == "sgd":
        return torch.optim.SGD(groups, lr=lr, momentum=cfg.get("momentum", 0.0))
    if name == "muon":
        return MuonWithAdamW(muon_groups(model, cfg))
    raise ConfigError(f"optimizer.name must be one of adamw, sgd, muon, got {name!r}: choose it with optimizer=adamw")


def build_schedule(optimizer: torch.optim.Optimizer, cfg: Mapping[str, Any]) -> torch.optim.lr_scheduler.LambdaLR:
    min_lr, lr = cfg.get("min_lr", cfg["lr"]), cfg["lr"]
    shape = WarmupCosine(cfg.get("warmup_steps", 0), cfg["decay_steps"], min_lr / lr)
    return torch.optim.lr_scheduler.LambdaLR(optimizer, shape)


def apply_settings(
    optimizer: torch.optim.Optimizer, schedule: torch.optim.lr_scheduler.LambdaLR, cfg: Mapping[str, Any]
) -> None:
    """Set rate, schedule and decay from cfg on an optimizer whose state a checkpoint may have restored.

    Resuming restores the saved param groups and schedule, which would silently keep the old
    settings: the ones typed now win, and the cosine is planned to cfg["decay_steps"].
    """
    lr = cfg["lr"]
    shape = WarmupCosine(cfg.get("warmup_steps", 0), cfg["decay_steps"], cfg.get("min_lr", lr) / lr)
    rates = group_rates(cfg)
    schedule.lr_lambdas = [shape] * len(optimizer.param_groups)
    schedule.base_lrs = [base for base, _ in rates]
    for group, (base, decay) in zip(optimizer.param_groups, rates, strict=True):
        group["lr"] = base * shape(schedule.last_epoch)
        group["initial_lr"] = base
        group["weight_decay"] = decay
        if "betas" in cfg and not group.get("muon"):
            group["betas"] = tuple(cfg["betas"])
        if "momentum" in cfg and (cfg["name"] != "muon" or group.get("muon")):
            group["momentum"] = cfg["momentum"]
