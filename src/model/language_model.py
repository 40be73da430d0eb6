"""What both model kinds share: their config's common keys, their attention layer, and ids in, logits for
every position out, loss when targets are given (the forward pass, the KV cache, the attention maps)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from src.model import checks
from src.model.attention import MultiHeadAttention, Rotary
from src.model.checks import setting
from src.model.kv_cache import KVCache
from src.model.layers import NORMS, cross_entropy


@dataclass
class ModelConfig:
    """The keys of both kinds (`model.<key>` on the command line): each setting's default and its line in --help."""

    vocab_size: int
    context_window: int = setting(64, "tokens the model sees at once; the data windows follow it")
    embedding_dim: int = setting(120, "d, the width of the residual stream; must divide by num_heads")
    num_heads: int = setting(4, "attention heads h, each d / h wide")
    positional: str = setting("sinusoidal", "sinusoidal, learned or rope (Q and K rotated by position, no PE)")
    fused: bool = setting(True, "PyTorch's fused kernels; false: the plain tensor math (same numbers, slower)")
    norm: str = setting("layer", "layer, or rms: x / sqrt(mean(x^2) + eps) * gain")
    qk_norm: bool = setting(False, "RMSNorm of each head's Q and K before Q K^T")
    num_kv_heads: int | None = setting(None, "k key/value heads shared by the query heads (GQA; 1 = MQA); null = h")
    logit_softcap: float | None = setting(None, "c: logits = c tanh(z / c); null = no cap")
    smeared_keys: bool = setting(False, "k'_j = sigmoid(a_h) k_j + (1 - sigmoid(a_h)) k_{j-1}, a learned a_h per head")
    attention_window: int | None = setting(None, "w: query i sees keys i-w+1 .. i; null = all earlier keys")

    def __post_init__(self) -> None:
        checks.positive_int("vocab_size", self.vocab_size)
        checks.positive_int("model.context_window", self.context_window)
        checks.heads_divide(self.embedding_dim, self.num_heads)
        checks.choice("model.positional", self.positional, checks.POSITIONAL)
        checks.choice("model.norm", self.norm, NORMS)
        checks.kv_heads_divide(self.num_heads, self.num_kv_heads)
        checks.logit_softcap(self.logit_softcap, self.vocab_size)
        checks.attention_window(self.attention_window)
        if self.positional == "rope":
            checks.rope_fits(self.embedding_dim // self.num_heads)


def attention_layer(cfg: ModelConfig, **options: Any) -> MultiHeadAttention:
    """An attention layer on the keys both kinds share; `options`: a kind's own (dropout, bias, ...)."""
    return MultiHeadAttention(
        cfg.embedding_dim,
        cfg.num_heads,
        cfg.num_kv_heads,
        fused=cfg.fused,
        qk_norm=cfg.qk_norm,
        rotary=Rotary(cfg.embedding_dim // cfg.num_heads, cfg.context_window) if cfg.positional == "rope" else None,
        smeared_keys=cfg.smeared_keys,
        window=cfg.attention_window,
        **options,
    )


class CausalLanguageModel(nn.Module):
    """Base class of SeedGPT and GPT. Each defines hidden_states(idx (B, T), cache, need_weights) -> the states fed
    to the output layer (B, T, d) and each layer's attention weights, and logits(H) -> (B, T, vocab_size)."""

    cfg: ModelConfig
    num_layers: int
    _compiled_forward: Any = None  # set by compile(): the training forward, compiled

    def compile(self, **options: Any) -> None:
        """torch.compile the training forward (replaces nn.Module.compile): one graph for the whole run.
        Validation, sampling and attention maps run eagerly (under no_grad), so they never recompile it;
        fullgraph=True makes a graph break an error. The parameters keep their plain names in checkpoints."""
        self._compiled_forward = torch.compile(self._forward, fullgraph=True, dynamic=False, **options)

    @property
    def context_window(self) -> int:
        return self.cfg.context_window

    def new_kv_cache(self, batch_size: int) -> KVCache:
        cfg = self.cfg
        E = self.embedding.E
        d_head = cfg.embedding_dim // cfg.num_heads
        kv_heads = cfg.num_kv_heads or cfg.num_heads  # GQA caches only the shared heads
        return KVCache(self.num_layers, batch_size, kv_heads, cfg.context_window, d_head, E.device, E.dtype)

    def check_length(self, idx: Tensor, cache: KVCache | None) -> int:
        """Return the position of idx[:, 0]; refuse sequences longer than the context window."""
        start = cache.length if cache is not None else 0
        end = start + idx.shape[1]
        if end > self.context_window:
            raise ValueError(
                f"sequence of {end} tokens is longer than context_window ({self.context_window}): "
                f"crop it to the last {self.context_window}"
            )
        return start

    def forward(
        self, idx: Tensor, targets: Tensor | None = None, cache: KVCache | None = None
    ) -> tuple[Tensor, Tensor | None]:
        """idx, targets: (B, T) -> logits (B, T, vocab_size), mean cross-entropy or None."""
        if self._compiled_forward is not None and cache is None and torch.is_grad_enabled():
            return self._compiled_forward(idx, targets)
        return self._forward(idx, targets, cache)

    def _forward(
        self, idx: Tensor, targets: Tensor | None = None, cache: KVCache | None = None
    ) -> tuple[Tensor, Tensor | None]:
        H, _ = self.hidden_states(idx, cache)
        logits = self.logits(H)
        if targets is None:
            return logits, None
        loss = cross_entropy(logits.flatten(0, 1), targets.flatten(), fused=self.cfg.fused)
        return logits, loss

    def attention_maps(self, idx: Tensor) -> list[Tensor]:
        """Each layer's attention weights (B, h, T, T), from the plain path whatever `fused` says."""
        _, weights = self.hidden_states(idx, need_weights=True)
        return weights  # type: ignore[return-value]


def count_parameters(model: nn.Module) -> int:
    """Number of scalars the optimizer updates (fixed buffers such as the sinusoidal PE excluded)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
