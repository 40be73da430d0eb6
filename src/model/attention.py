"""Causal self-attention, written as the formulas of the attention notes.

    Q = X W_Q,   K = X W_K,   V = X W_V
    scores   = Q K^T / sqrt(d_k)                     (T, T)
    scores   = scores + M,  M[i, j] = -inf if j > i  (the causal mask, before the softmax)
    weights  = softmax(scores)                       (each row sums to 1)
    context  = weights V

Every step exists here as plain tensor math. `fused=True` swaps the last four lines for
`torch.nn.functional.scaled_dot_product_attention`, the same numbers in one kernel, which cannot hand
the weights back; tests prove both paths equal. Today's switches that act here: gpt.py's header.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from src.model.checks import attention_window, heads_divide, kv_heads_divide
from src.model.kv_cache import KVCache
from src.model.layers import RMSNorm, linear


def causal_mask(T: int, device: torch.device | str | None = None, window: int | None = None) -> Tensor:
    """Bool mask (1, 1, T, T), True where position i may not see j: above the diagonal (j > i) and, with a
    sliding window w, where j <= i - w (query i sees keys i-w+1 .. i). The leading ones broadcast over (B, h)."""
    ones = torch.ones(T, T, dtype=torch.bool, device=device)
    mask = ones.triu(diagonal=1)  # j > i: the future
    if window is not None:
        mask = mask | ones.tril(diagonal=-window)  # j <= i - w: older than the window
    return mask.view(1, 1, T, T)


def softmax(scores: Tensor, dim: int = -1) -> Tensor:
    """softmax(s)_j = exp(s_j - max s) / sum_k exp(s_k - max s): subtracting the row maximum changes nothing
    but keeps exp() from overflowing; exp(-inf) = 0 is exactly how masked positions drop out."""
    shifted = scores - scores.amax(dim=dim, keepdim=True)
    exp = shifted.exp()
    return exp / exp.sum(dim=dim, keepdim=True)


def scaled_dot_product_attention(
    Q: Tensor, K: Tensor, V: Tensor, mask: Tensor | None = None, dropout: float = 0.0, training: bool = False
) -> tuple[Tensor, Tensor]:
    """The plain path: Q (..., T_q, d_k), K (..., T_k, d_k), V (..., T_k, d_v) -> (context, weights).
    mask is True where a query may NOT attend and broadcasts to (..., T_q, T_k)."""
    d_k = Q.shape[-1]
    scores = Q @ K.transpose(-2, -1) / math.sqrt(d_k)  # (..., T_q, T_k)
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))  # -inf *before* the softmax
    weights = softmax(scores, dim=-1)  # (..., T_q, T_k), rows sum to 1
    if dropout > 0.0 and training:
        weights = F.dropout(weights, p=dropout)
    context = weights @ V  # (..., T_q, d_v)
    return context, weights


def smear_keys(K: Tensor, alpha: Tensor | None) -> Tensor:
    """Smeared keys (Olsson et al. 2022, "In-context learning and induction heads"):

        k'_j = sigmoid(alpha_h) k_j + (1 - sigmoid(alpha_h)) k_{j-1},   k'_0 = k_0

    one learned scalar alpha_h per key head. A query that matches the previous position's part of k'_j
    finds the position whose predecessor equals its own token, so one attention layer can be an induction
    head. It looks only backwards: the causal mask still holds. K: (B, k, T, d_head); alpha None: K as is.
    """
    if alpha is None:
        return K
    s = torch.sigmoid(alpha).view(1, -1, 1, 1)  # (1, k, 1, 1), in (0, 1)
    K_before = torch.cat([K[:, :, :1], K[:, :, :-1]], dim=2)  # k_{j-1}; k_{-1} := k_0 gives k'_0 = k_0
    return s * K + (1 - s) * K_before  # (B, k, T, d_head)


def attention_without_parameters(X: Tensor, causal: bool = True) -> tuple[Tensor, Tensor]:
    """The notes' baseline, Q = K = V = X with no trainable matrices: each position becomes a similarity-
    weighted average of the (earlier) positions. X: (..., T, d) -> (context, weights)."""
    mask = causal_mask(X.shape[-2], X.device)[0, 0] if causal else None
    return scaled_dot_product_attention(X, X, X, mask=mask)


def _init_projection(d_in: int, d_out: int, std: float = 0.02) -> nn.Parameter:
    """A (d_in, d_out) matrix W so that a projection reads X @ W, as in the notes."""
    return nn.Parameter(torch.randn(d_in, d_out) * std)


class SingleHeadSelfAttention(nn.Module):
    """One causal head with its own W_Q, W_K, W_V (d_model, d_k): the clearest place to watch the shapes
    flow (`trace_shapes=True` prints every intermediate shape)."""

    def __init__(self, d_model: int, d_k: int, dropout: float = 0.0, trace_shapes: bool = False):
        super().__init__()
        self.W_Q = _init_projection(d_model, d_k)
        self.W_K = _init_projection(d_model, d_k)
        self.W_V = _init_projection(d_model, d_k)
        self.dropout = dropout
        self.trace_shapes = trace_shapes

    def forward(self, X: Tensor) -> tuple[Tensor, Tensor]:
        """X: (B, T, d_model) -> out (B, T, d_k), weights (B, T, T)."""
        Q, K, V = X @ self.W_Q, X @ self.W_K, X @ self.W_V  # (B, T, d_k) each
        mask = causal_mask(X.shape[1], X.device)[0]  # (1, T, T)
        out, weights = scaled_dot_product_attention(Q, K, V, mask, self.dropout, self.training)
        if self.trace_shapes:  # every intermediate, in the order computed
            for name, tensor in {"X": X, "Q": Q, "K": K, "V": V, "mask": mask, "weights": weights, "out": out}.items():
                print(f"{name:>8}: {tuple(tensor.shape)}")
        return out, weights


class Rotary(nn.Module):
    """Rotary position embeddings (RoPE, Su et al. 2021): positions enter attention as rotations of Q and K.

    Nothing is added to X. The d_head numbers of a query or key at position m form pairs
    (x_i, x_{i + d_head/2}), and pair i turns by the angle m theta_i, theta_i = base^(-2i / d_head):

        [x_i', x_{i+d/2}'] = [x_i cos(m theta_i) - x_{i+d/2} sin(m theta_i),
                              x_i sin(m theta_i) + x_{i+d/2} cos(m theta_i)]

    q_m . k_n after the turns depends only on m - n, so keys cached during generation stay right for later
    queries. (The Llama code's pairs; the paper's (2i, 2i+1) are the same rotation in a permuted basis.)
    """

    def __init__(self, d_head: int, max_len: int, base: float = 10000.0):
        super().__init__()
        theta = base ** (-torch.arange(0, d_head, 2, dtype=torch.float64) / d_head)  # (d_head/2,)
        angle = torch.arange(max_len, dtype=torch.float64).unsqueeze(1) * theta  # (max_len, d_head/2): m theta_i
        angle = torch.cat([angle, angle], dim=-1)  # (max_len, d_head): both halves turn by the same angle
        self.register_buffer("cos", angle.cos().float(), persistent=False)
        self.register_buffer("sin", angle.sin().float(), persistent=False)

    def forward(self, x: Tensor, start: int = 0) -> Tensor:
        """x: (B, h, T, d_head) at positions start..start+T-1 -> x rotated, same shape."""
        T = x.shape[-2]
        cos, sin = self.cos[start : start + T], self.sin[start : start + T]  # (T, d_head)
        x_1, x_2 = x.chunk(2, dim=-1)
        return x * cos + torch.cat([-x_2, x_1], dim=-1) * sin  # x * cos + rotate_half(x) * sin


class Unrotated(nn.Module):
    """The positions step when nothing turns Q and K (sinusoidal or learned positions were added to X)."""

    def forward(self, x: Tensor, start: int = 0) -> Tensor:
        return x


def fused_attention(Q: Tensor, K: Tensor, V: Tensor, mask: Tensor, dropout: float, square: bool) -> Tensor:
    """The plain path's context in one kernel, without the weights. Q: (B, h, T, d_head); K, V: (B, k, T_k,
    d_head), k <= h (enable_gqa shares them). `square`: the mask is the plain causal (T, T) one, which the
    kernel builds itself (is_causal, its fastest path)."""
    gqa = K.shape[1] != Q.shape[1]
    if square:
        return F.scaled_dot_product_attention(Q, K, V, dropout_p=dropout, is_causal=True, enable_gqa=gqa)
    return F.scaled_dot_product_attention(Q, K, V, attn_mask=~mask, dropout_p=dropout, enable_gqa=gqa)


class MultiHeadAttention(nn.Module):
    """h causal heads in parallel, concatenated and projected by W_O.

    The heads are not separate modules: X W_Q (d_model wide) is split into h slices of d_head = d_model / h
    columns by reshape + transpose; W_K and W_V give k = num_kv_heads heads (k = h unless GQA is asked for).
    The options are composed here, once, so that `forward` is the notes' steps top to bottom: each step is
    a module or a parameter that is the identity (or absent) when its option is off.
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        num_kv_heads: int | None = None,
        *,
        dropout: float = 0.0,
        fused: bool = False,
        bias: bool = False,  # b_QKV, and b_O after W_O
        output_projection: bool = True,  # W_O; the notes' smallest model goes without it
        out_std: float = 0.02,  # the std of W_O's initial weights
        qk_norm: bool = False,
        rotary: Rotary | None = None,
        smeared_keys: bool = False,
        window: int | None = None,  # query i sees keys i-w+1 .. i; None: every earlier key
    ):
        super().__init__()
        heads_divide(d_model, num_heads)
        kv_heads_divide(num_heads, num_kv_heads)
        attention_window(window)
        self.d_model, self.num_heads, self.d_head = d_model, num_heads, d_model // num_heads
        self.num_kv_heads = num_kv_heads or num_heads
        self.dropout, self.fused, self.window = dropout, fused, window
        d_kv = self.num_kv_heads * self.d_head  # = d_model without GQA
        self.W_Q = _init_projection(d_model, d_model)
        self.W_K = _init_projection(d_model, d_kv)
        self.W_V = _init_projection(d_model, d_kv)
        self.b_QKV = nn.Parameter(torch.zeros(3, d_model)) if bias else None
        self.W_O = _init_projection(d_model, d_model, out_std) if output_projection else None
        self.b_O = nn.Parameter(torch.zeros(d_model)) if bias and output_projection else None
        # qk_norm: one gain of d_head numbers for all query heads, one for all key heads (as in Qwen3, OLMo 2).
        self.q_norm = RMSNorm(self.d_head, fused=fused) if qk_norm else nn.Identity()
        self.k_norm = RMSNorm(self.d_head, fused=fused) if qk_norm else nn.Identity()
        self.rotary = Unrotated() if rotary is None else rotary  # RoPE: its tables are buffers, never trained
        # alpha_h of the smeared keys, one per key head; 0 starts each key as half its own, half its predecessor's.
        self.smear = nn.Parameter(torch.zeros(self.num_kv_heads)) if smeared_keys else None

    def project(self, X: Tensor, value_embedding: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """Q, K, V = X W_Q (+ b_Q), X W_K (+ b_K), X W_V (+ b_V) (+ E_V[tokens], the value embedding).
        X: (B, T, d_model) -> Q (B, T, d_model), K and V (B, T, k d_head)."""
        Q, K, V = X @ self.W_Q, X @ self.W_K, X @ self.W_V
        if self.b_QKV is not None:
            Q, K, V = Q + self.b_QKV[0], K + self.b_QKV[1], V + self.b_QKV[2]
        if value_embedding is not None:
            V = V + value_embedding
        return Q, K, V

    def project_out(self, context: Tensor) -> Tensor:
        """The heads concatenated, (B, T, d_model), times W_O (+ b_O); as they are without W_O."""
        return context if self.W_O is None else linear(context, self.W_O, self.b_O)

    def split_heads(self, X: Tensor, num_heads: int | None = None) -> Tensor:
        """(B, T, n * d_head) -> (B, n, T, d_head); n = num_heads unless given."""
        B, T, _ = X.shape
        return X.reshape(B, T, num_heads or self.num_heads, self.d_head).transpose(1, 2)

    def merge_heads(self, X: Tensor) -> Tensor:
        """(B, h, T, d_head) -> (B, T, d_model): the concatenation of the heads."""
        B, _, T, _ = X.shape
        return X.transpose(1, 2).reshape(B, T, self.d_model)

    def share_kv_heads(self, K: Tensor) -> Tensor:
        """(B, k, T, d_head) -> (B, h, T, d_head): query head i reads key/value head i // (h / k)."""
        group = self.num_heads // self.num_kv_heads
        return K if group == 1 else K.repeat_interleave(group, dim=1)

    def forward(
        self,
        X: Tensor,
        cache: KVCache | None = None,
        layer: int = 0,
        need_weights: bool = False,
        value_embedding: Tensor | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """X: (B, T, d_model) -> (out (B, T, d_model), weights (B, h, T, T_k) or None). With a `cache`, X holds
        only the new positions start .. start + T - 1, and T_k = start + T. `need_weights` forces the plain
        path. value_embedding: E_V[tokens] (B, T, k d_head), added to V, or None."""
        start = 0 if cache is None else cache.length  # the position of X's first row
        Q, K, V = self.project(X, value_embedding)  # (B, T, d_model), (B, T, k d_head) twice
        k = self.num_kv_heads
        Q, K, V = self.split_heads(Q), self.split_heads(K, k), self.split_heads(V, k)  # (B, h or k, T, d_head)
        Q, K = self.q_norm(Q), self.k_norm(K)  # qk_norm: RMSNorm of each head's q and k
        Q, K = self.rotary(Q, start), self.rotary(K, start)  # RoPE: position m turns q, k by m theta_i
        if cache is not None:
            K, V = cache.update(layer, K, V)  # (B, k, T_k, d_head): all positions so far, keys unsmeared
        K = smear_keys(K, self.smear)  # smeared keys: k'_j = s k_j + (1 - s) k_{j-1}, after RoPE and the cache
        mask = causal_mask(K.shape[2], X.device, self.window)[..., start:, :]  # (1, 1, T, T_k): new rows of M

        if self.fused and not need_weights:  # PyTorch's kernel: the same numbers, no weights
            dropout = self.dropout if self.training else 0.0
            square = start == 0 and self.window is None  # the plain causal mask: the kernel's own
            context, weights = fused_attention(Q, K, V, mask, dropout, square), None
        else:  # the notes' steps: Q K^T / sqrt(d_k), -inf where M, softmax, weights V
            K, V = self.share_kv_heads(K), self.share_kv_heads(V)  # (B, h, T_k, d_head)
            context, weights = scaled_dot_product_attention(Q, K, V, mask, self.dropout, self.training)
        return self.project_out(self.merge_heads(context)), weights  # (B, h, T, d_head) -> (B, T, d_model)
