"""The GPT users train by default: N pre-LN residual blocks of attention + MLP.

X_0 = E[tokens] + PE
X_l = X_{l-1} + Attention(LN(X_{l-1}));   X_l = X_l + MLP(LN(X_l))      for l = 1..N
logits = LN(X_N) W_vocab        (W_vocab = E^T when the weights are tied)

That is GPT-2's model. The switches below move it, one place each, towards today's models; all are
off by default, and each is written beside its formula where it acts:

    model.positional=rope       no PE added; Q and K rotated by position          attention.py, Rotary
    model.norm=rms              every LN becomes RMSNorm (norm_gain: with a gain or not)  layers.py
    model.activation=relu2      the MLP's GELU becomes max(0, x)^2; swiglu: a gated MLP   layers.py, MLP
    model.qk_norm=true          RMSNorm of each head's Q and K before Q K^T       attention.py
    model.num_kv_heads=k        k heads of K, V shared by the h query heads (GQA)  attention.py
    model.logit_softcap=c       logits = c tanh(z / c)                            layers.py, softcap
    model.value_embeddings=true V = X W_V + E_V[tokens], a table E_V per layer    Block, below
    model.smeared_keys=true     k'_j = s k_j + (1 - s) k_{j-1}, s = sigmoid(alpha_h): one layer can
                                be an induction head (Olsson et al. 2022)         attention.py
    model.attention_window=w    query i sees keys i-w+1 .. i only (sliding window)  attention.py

model.scale=k is the size dial (nanochat's depth dial, at this CPU's sizes): one integer sets the three
sizes, the width growing with the depth so that the aspect d / N_layers stays 16,

    num_layers = k,   embedding_dim = d = 16 k,   num_heads = k   (each head 16 wide)

k = 1..5 spans 4.2K to 390K parameters, the compute-optimal sizes (~20 tokens per parameter) of budgets
of 1e10 to 1e12 FLOPs, which this 2-core CPU trains in seconds to minutes; k = 6 has about the default
model's parameters (0.67M against 0.70M). The learning rate follows the width (src/training/optim.py,
hidden_lr_scale).

mlp_ratio=0 leaves the MLP out: an attention-only transformer, X_l = X_{l-1} + Attention(LN(X_{l-1})),
the classic setting in which induction heads are studied (docs/heads.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from src.model.checks import InvalidModelConfig, choice, dropout, non_negative_int, positive_int, setting
from src.model.kv_cache import KVCache
from src.model.language_model import CausalLanguageModel, ModelConfig, attention_layer
from src.model.layers import ACTIVATIONS, MLP, TokenAndPositionEmbedding, norm_layer, softcap


@dataclass
class GPTConfig(ModelConfig):
    """The GPT's keys: those of both kinds (ModelConfig) and these."""

    num_layers: int = setting(4, "transformer blocks N")
    mlp_ratio: int = setting(4, "MLP width / d; 0: no MLP (attention-only)")
    dropout: float = setting(0.0, "dropout on the attention weights and the residual branches")
    bias: bool = setting(False, "biases in the projections and layer norms")
    tie_weights: bool = setting(True, "the LM head reuses the embedding matrix E")
    norm_gain: bool = setting(True, "a learned gain after each norm")
    activation: str = setting("gelu", "gelu, relu2 (max(0, x)^2) or swiglu (SiLU(x W_1) * x W_3, then W_2)")
    value_embeddings: bool = setting(False, "V = X W_V + E_V[tokens], a table E_V per layer")
    scale: int | None = setting(None, "k: num_layers k, embedding_dim 16k, num_heads k; AdamW's matrices at lr x 128/d")

    def __post_init__(self) -> None:
        if self.scale is not None:  # the dial wins over the three sizes a preset sets
            positive_int("model.scale", self.scale, "the size dial: k layers of width 16k, e.g. model.scale=1,2,3,4,5")
            self.num_layers, self.embedding_dim, self.num_heads = scaled_sizes(self.scale)
        super().__post_init__()
        positive_int("model.num_layers", self.num_layers)
        non_negative_int("model.mlp_ratio", self.mlp_ratio, "0 leaves the MLP out (attention-only)")
        dropout(self.dropout)
        choice("model.activation", self.activation, ACTIVATIONS)
        if self.bias and self.num_kv_heads not in (None, self.num_heads):
            raise InvalidModelConfig(
                f"model.bias=true gives Q, K and V one bias each of the full width, which shared keys and values "
                f"(model.num_kv_heads={self.num_kv_heads}) do not have: set model.bias=false or model.num_kv_heads=null"
            )


def scaled_sizes(k: int) -> tuple[int, int, int]:
    """model.scale=k: (num_layers, embedding_dim, num_heads) = (k, 16 k, k)."""
    return k, HEAD_WIDTH * k, k


HEAD_WIDTH = 16  # d / h under model.scale


class Block(nn.Module):
    """Pre-LN residual block: normalise, transform, add back to the residual stream."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        d = cfg.embedding_dim
        out_std = 0.02 / math.sqrt(2 * cfg.num_layers)  # 2N residual branches add up
        self.ln_1 = norm_layer(cfg.norm, d, cfg.norm_gain, cfg.bias, cfg.fused)
        self.attention = attention_layer(cfg, dropout=cfg.dropout, bias=cfg.bias, out_std=out_std)
        self.residual_dropout = nn.Dropout(cfg.dropout)
        self.mlp = None  # mlp_ratio 0, attention-only: no MLP and no norm before it
        if cfg.mlp_ratio > 0:
            self.ln_2 = norm_layer(cfg.norm, d, cfg.norm_gain, cfg.bias, cfg.fused)
            self.mlp = MLP(d, cfg.mlp_ratio, cfg.dropout, cfg.bias, cfg.fused, out_std, cfg.activation)
        d_kv = self.attention.num_kv_heads * self.attention.d_head
        # Value embeddings (modded-nanogpt): the layer's values also read the token itself, E_V[token].
        self.E_V = nn.Parameter(torch.randn(cfg.vocab_size, d_kv) * 0.02) if cfg.value_embeddings else None

    def forward(
        self,
        X: Tensor,
        cache: KVCache | None = None,
        layer: int = 0,
        need_weights: bool = False,
        idx: Tensor | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """X: (B, T, d) -> (B, T, d), attention weights (B, h, T, T_k) or None. idx: the tokens (B, T)."""
        value_embedding = None if self.E_V is None else F.embedding(idx, self.E_V)  # (B, T, k d_head)
        attended, weights = self.attention(self.ln_1(X), cache, layer, need_weights, value_embedding)
        X = X + self.residual_dropout(attended)
        if self.mlp is not None:
            X = X + self.mlp(self.ln_2(X))
        return X, weights


class GPT(CausalLanguageModel):
    """Decoder-only transformer over characters."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.cfg = cfg
        self.num_layers = cfg.num_layers
        d = cfg.embedding_dim
        self.embedding = TokenAndPositionEmbedding(cfg.vocab_size, d, cfg.context_window, cfg.positional)
        self.dropout = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.num_layers))
        self.ln_f = norm_layer(cfg.norm, d, cfg.norm_gain, cfg.bias, cfg.fused)
        self.W_vocab = None if cfg.tie_weights else nn.Parameter(torch.randn(d, cfg.vocab_size) * 0.02)

    def hidden_states(
        self, idx: Tensor, cache: KVCache | None = None, need_weights: bool = False
    ) -> tuple[Tensor, list[Tensor | None]]:
        start = self.check_length(idx, cache)
        X = self.dropout(self.embedding(idx, start))  # (B, T, d)
        all_weights = []
        for layer, block in enumerate(self.blocks):
            X, weights = block(X, cache, layer, need_weights, idx)
            all_weights.append(weights)
        if cache is not None:
            cache.advance(idx.shape[1])
        return self.ln_f(X), all_weights

    def logits(self, H: Tensor) -> Tensor:
        W_vocab = self.embedding.E.t() if self.W_vocab is None else self.W_vocab  # (d, vocab)
        return softcap(H @ W_vocab, self.cfg.logit_softcap)
