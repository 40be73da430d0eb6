"""SeedGPT: exactly the model of the attention notes, one attention layer and nothing else.

    X      = E[tokens] + PE                        (B, T, d)
    X      = LayerNorm(X)
    Q, K, V = X W_Q, X W_K, X W_V, split into h heads
    context = softmax(Q K^T / sqrt(d_k) + M) V,  heads concatenated, times W_O (optional)
    logits  = context W_out + b_out                 (B, T, vocab_size)

No residual connection, no MLP (so no activation, no value embeddings): the smallest model in which
attention alone predicts the next character. The notes' sizes are the defaults: T 10, d 60, 5 heads.

Four options are where `model=seed` departs from the notes by default, each to train better
with AdamW at an ordinary rate; `experiment=notes_recipe` switches all four to the notes' values:

    option              default (model=seed)               the notes
    init                small: N(0, 0.02^2) weights        notes: torch.randn for E, W_Q, W_K, W_V, W_out
    ln_affine           true: LayerNorm(X) * gain + bias   false: (X - mean) / sqrt(var + eps)
    embedding_scale     true: E[token] * sqrt(d) + PE      false: E[token] + PE
    output_projection   true: heads concatenated, @ W_O    false: heads concatenated

The switches of both kinds (ModelConfig, language_model.py) work here as in the GPT; rms takes its gain
from ln_affine, and smeared keys let this one layer be an induction head.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from src.model.checks import choice, setting
from src.model.kv_cache import KVCache
from src.model.language_model import CausalLanguageModel, ModelConfig, attention_layer
from src.model.layers import TokenAndPositionEmbedding, norm_layer, softcap


@dataclass
class SeedGPTConfig(ModelConfig):
    """The seed model's keys: those of both kinds (ModelConfig) at the notes' sizes, and the four departures."""

    context_window: int = setting(10, "tokens the model sees at once; the data windows follow it")
    embedding_dim: int = setting(60, "d, the width of the embedding; must divide by num_heads")
    num_heads: int = setting(5, "attention heads h, each d / h wide")
    output_projection: bool = setting(True, "W_O after concatenating the heads (the notes: false)")
    init: str = setting("small", "N(0, 0.02^2) weights; notes: E, W_Q, W_K, W_V, W_out by torch.randn, N(0, 1)")
    ln_affine: bool = setting(True, "learned gain and bias after the layer norm, or RMSNorm's gain (the notes: false)")
    embedding_scale: bool = setting(True, "E[token] * sqrt(d) + PE (the notes: false, E[token] + PE)")

    def __post_init__(self) -> None:
        super().__post_init__()
        choice("model.init", self.init, ("small", "notes"))


class SeedGPT(CausalLanguageModel):
    num_layers = 1

    def __init__(self, cfg: SeedGPTConfig):
        super().__init__()
        self.cfg = cfg
        d = cfg.embedding_dim
        self.embedding = TokenAndPositionEmbedding(
            cfg.vocab_size, d, cfg.context_window, cfg.positional, scale_tokens=cfg.embedding_scale
        )
        self.ln = norm_layer(cfg.norm, d, gain=cfg.ln_affine, bias=cfg.ln_affine, fused=cfg.fused)
        self.attention = attention_layer(cfg, output_projection=cfg.output_projection)
        self.W_out = nn.Parameter(torch.randn(d, cfg.vocab_size) * 0.02)
        self.b_out = nn.Parameter(torch.zeros(cfg.vocab_size))
        if cfg.init == "notes":
            with torch.no_grad():  # the notes: E, W_Q, W_K, W_V, W_out = torch.randn(...); b_out = 0
                for W in (self.embedding.E, self.attention.W_Q, self.attention.W_K, self.attention.W_V, self.W_out):
                    W.copy_(torch.randn_like(W))

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
        return softcap(H @ self.W_out + self.b_out, self.cfg.logit_softcap)  # (B, T, vocab_size)
