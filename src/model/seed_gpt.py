"""SeedGPT: exactly the model of the attention notes, one attention layer and nothing else.

    X      = E[tokens] + PE                        (B, T, d)
    X      = LayerNorm(X)
    Q, K, V = X W_Q, X W_K, X W_V, split into h heads
    context = softmax(Q K^T / sqrt(d_k) + M) V,  heads concatenated, times W_O (optional)
    logits  = context W_out + b_out                 (B, T, vocab_size)

No residual connection, no MLP: the smallest model in which attention alone predicts the next
character. The notes' sizes are the defaults: context_window 10, embedding_dim 60, 5 heads.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from src.model.attention import MultiHeadAttention
from src.model.checks import check_heads, check_positive
from src.model.embedding import TokenAndPositionEmbedding
from src.model.kv_cache import KVCache
from src.model.language_model import CausalLanguageModel
from src.model.layers import LayerNorm


@dataclass
class SeedGPTConfig:
    vocab_size: int
    context_window: int = 10
    embedding_dim: int = 60
    num_heads: int = 5
    output_projection: bool = True  # W_O after concatenating the heads
    positional: str = "sinusoidal"
    fused: bool = False

    def __post_init__(self) -> None:
        check_positive(
            vocab_size=self.vocab_size,
            context_window=self.context_window,
            embedding_dim=self.embedding_dim,
            num_heads=self.num_heads,
        )
        check_heads(self.embedding_dim, self.num_heads)


class SeedGPT(CausalLanguageModel):
    num_layers = 1

    def __init__(self, cfg: SeedGPTConfig):
        super().__init__()
        self.cfg = cfg
        d = cfg.embedding_dim
        self.embedding = TokenAndPositionEmbedding(cfg.vocab_size, d, cfg.context_window, cfg.positional)
        self.ln = LayerNorm(d, fused=cfg.fused)
        self.attention = MultiHeadAttention(d, cfg.num_heads, output_projection=cfg.output_projection, fused=cfg.fused)
        self.W_out = nn.Parameter(torch.randn(d, cfg.vocab_size) * 0.02)
        self.b_out = nn.Parameter(torch.zeros(cfg.vocab_size))

    def hidden_states(
        self, idx: Tensor, cache: KVCache | None = None, need_weights: bool = False
    ) -> tuple[Tensor, list[Tensor | None]]:
        start = self.check_length(idx, cache)
        X = self.ln(self.embedding(idx, start))  # (B, T, d)
        context, weights = self.attention(X, cache, 0, need_weights)  # (B, T, d)
        if cache is not None:
            cache.advance(idx.shape[1])
        return context, [weights]

    def logits(self, H: Tensor) -> Tensor:
        return H @ self.W_out + self.b_out  # (B, T, vocab_size)
