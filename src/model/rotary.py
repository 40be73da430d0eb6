"""Rotary position embeddings (RoPE, Su et al. 2021): positions enter attention as rotations of Q and K.

Nothing is added to X. Instead each head's query and key at position m are rotated: the d_head
numbers form d_head/2 pairs (x_i, x_{i + d_head/2}), and pair i turns by the angle m * theta_i,

    theta_i = base^(-2i / d_head)                      i = 0 .. d_head/2 - 1
    [x_i', x_{i+d/2}'] = [x_i cos(m theta_i) - x_{i+d/2} sin(m theta_i),
                          x_i sin(m theta_i) + x_{i+d/2} cos(m theta_i)]

Written with the halves x_1 = x[:d/2], x_2 = x[d/2:]:  x' = x * cos + rotate_half(x) * sin, with
rotate_half(x) = [-x_2, x_1] and cos, sin repeated over both halves. A rotation keeps lengths, and
q_m . k_n after rotating by m and n depends only on m - n: attention sees relative positions, and
keys cached during generation, rotated at their own positions, stay right for later queries.
(The pairs here are (i, i + d/2), as in the Llama code; the paper pairs neighbours (2i, 2i+1).
Both are the same rotation in a permuted basis.)
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

BASE = 10000.0


def rotate_half(x: Tensor) -> Tensor:
    """[x_1, x_2] -> [-x_2, x_1] over the last dimension."""
    x_1, x_2 = x.chunk(2, dim=-1)
    return torch.cat([-x_2, x_1], dim=-1)


class Rotary(nn.Module):
    """cos(m theta_i) and sin(m theta_i) for positions m < max_len (buffers, never trained)."""

    def __init__(self, d_head: int, max_len: int, base: float = BASE):
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
        return x * cos + rotate_half(x) * sin
