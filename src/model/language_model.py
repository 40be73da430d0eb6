"""What every model here shares: ids in, logits for every position out, loss when targets are given.

A subclass defines `hidden_states` (the architecture) and `logits` (the output layer); the
forward pass, the KV cache and the attention maps then work the same for all of them.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from src.model.kv_cache import KVCache
from src.model.layers import cross_entropy


class CausalLanguageModel(nn.Module):
    """Base class of SeedGPT and GPT. `cfg` is the model's config dataclass."""

    cfg: Any
    num_layers: int
    _compiled_forward: Any = None  # set by compile(): the training forward, compiled

    def compile(self, **options: Any) -> None:
        """torch.compile the training forward pass (replaces nn.Module.compile).

        Only calls that build a graph for backward use it: one compiled graph for the whole run.
        Validation, sampling and attention maps run eagerly (under no_grad), so they never
        trigger a recompile mid-run. fullgraph=True: a graph break is an error here, never a
        silent fall back to eager. The parameters are untouched: checkpoints keep plain names.
        """
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

    def hidden_states(
        self, idx: Tensor, cache: KVCache | None = None, need_weights: bool = False
    ) -> tuple[Tensor, list[Tensor | None]]:
        """idx (B, T) -> states fed to the output layer (B, T, d), each layer's attention weights."""
        raise NotImplementedError

    def logits(self, H: Tensor) -> Tensor:
        """(B, T, d) -> (B, T, vocab_size)."""
        raise NotImplementedError

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
