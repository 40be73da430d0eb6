"""Take heads out: a head's output, before W_O, replaced by zero or by its mean, so the loss with and
without it says whether the model needs it (issue 45; Olsson et al. 2022 ablate heads so).

    out = concat(c^1, ..., c^h) W_O (+ b_O)      c^i: head i's context, softmax(...) V^i, (B, T, d_head)
    zero ablation:   c^i -> 0                    (b_O stays: it is no head's)
    mean ablation:   c^i -> mean_{b, t} c^i      over a reference batch of windows (`mean_over`)

`ablate(model, heads)` is a context manager: inside it every forward (fused or plain path, with a KV
cache too) goes without those heads; on leaving it the model is as it was. Imports only torch.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
from torch import Tensor, nn

from src.model.attention import MultiHeadAttention
from src.model.checks import InvalidModelConfig, choice

MODES = ("zero", "mean")
HEAD = re.compile(r"^L(\d+)H(\d+)$")


def attention_layers(model: nn.Module) -> list[MultiHeadAttention]:
    """The model's attention layers in order: a GPT's blocks', or the seed model's one."""
    return [block.attention for block in model.blocks] if hasattr(model, "blocks") else [model.attention]


def parse_heads(
    names: str | Sequence[str], num_layers: int, num_heads: int, key: str = "ablate"
) -> list[tuple[int, int]]:
    """ "L0H2" or ["L0H2", "L1H0"] -> [(0, 2), (1, 0)], each checked against the model's layers and heads."""
    listed = [names] if isinstance(names, str) else list(names)
    example = f"e.g. {key}=L0H2 or {key}=[L0H2,L1H0]"
    if not listed:
        raise InvalidModelConfig(f"{key} names no head: name one as L<layer>H<head>, {example}")
    heads = []
    for name in listed:
        found = HEAD.match(str(name))
        if found is None:
            raise InvalidModelConfig(f"{key}={name} is not a head: write L<layer>H<head>, {example}")
        layer, head = int(found[1]), int(found[2])
        if layer >= num_layers or head >= num_heads:
            raise InvalidModelConfig(
                f"{key}={name} is not a head of this model, which has layers L0-L{num_layers - 1} and heads "
                f"H0-H{num_heads - 1}: {example}"
            )
        heads.append((layer, head))
    return heads


@torch.no_grad()
def head_means(model: nn.Module, heads: Sequence[tuple[int, int]], idx: Tensor) -> dict[tuple[int, int], Tensor]:
    """Each head's context averaged over the windows idx (B, T) and their positions: (d_head,) per head."""
    means: dict[tuple[int, int], Tensor] = {}
    layers = attention_layers(model)

    def recorder(layer: int, attention: MultiHeadAttention) -> Any:
        def project_out(context: Tensor) -> Tensor:  # (B, T, d_model): the heads side by side
            B, T, _ = context.shape
            per_head = context.view(B, T, attention.num_heads, attention.d_head)
            for at, h in heads:
                if at == layer:
                    means[(at, h)] = per_head[:, :, h].mean(dim=(0, 1))
            return type(attention).project_out(attention, context)

        return project_out

    try:
        for layer, attention in enumerate(layers):
            attention.project_out = recorder(layer, attention)
        model.hidden_states(idx)
    finally:
        for attention in layers:
            attention.__dict__.pop("project_out", None)
    return means


@contextmanager
def ablate(
    model: nn.Module, heads: Sequence[tuple[int, int]], mode: str = "zero", mean_over: Tensor | None = None
) -> Iterator[None]:
    """Within the block, the heads (layer, head) give zero (mode "zero") or their mean context over the
    windows `mean_over` (B, T) (mode "mean") instead of their output."""
    choice("mode", mode, MODES)
    if mode == "mean" and mean_over is None:
        raise InvalidModelConfig("mean ablation needs windows to average each head's output over: pass mean_over")
    layers = attention_layers(model)
    means = head_means(model, heads, mean_over) if mode == "mean" else {}

    def without(layer: int, attention: MultiHeadAttention) -> Any:
        taken = [h for at, h in heads if at == layer]

        def project_out(context: Tensor) -> Tensor:
            B, T, _ = context.shape
            per_head = context.reshape(B, T, attention.num_heads, attention.d_head).clone()  # (B, T, h, d_head)
            for h in taken:
                per_head[:, :, h] = means[(layer, h)] if mode == "mean" else 0.0
            return type(attention).project_out(attention, per_head.view(B, T, -1))

        return project_out

    try:
        for layer, attention in enumerate(layers):
            if any(at == layer for at, _ in heads):
                attention.project_out = without(layer, attention)  # the instance's, over the class's method
        yield
    finally:
        for attention in layers:
            attention.__dict__.pop("project_out", None)


@torch.no_grad()
def window_loss(model: nn.Module, idx: Tensor) -> float:
    """Mean cross-entropy of each window's next tokens: idx (B, T) predicts idx[:, 1:] from idx[:, :-1]."""
    _, loss = model(idx[:, :-1], idx[:, 1:])
    return float(loss)


@torch.no_grad()
def ablation_table(model: nn.Module, idx: Tensor) -> dict[str, Any]:
    """The loss on windows idx (B, T) with every head, and how much it rises with each head zero-ablated
    alone: {"loss": float, "rise": [[per head] per layer], "mode": "zero", "windows": B}. The model in eval
    mode (dropout off), as for any measurement."""
    base = window_loss(model, idx)
    layers = attention_layers(model)
    rise = []
    for layer, attention in enumerate(layers):
        row = []
        for head in range(attention.num_heads):
            with ablate(model, [(layer, head)]):
                row.append(window_loss(model, idx) - base)
        rise.append(row)
    return {"loss": base, "rise": rise, "mode": "zero", "windows": idx.shape[0]}
