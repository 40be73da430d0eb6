"""Keys and values of the positions already seen, so generating a token costs one position: each layer
computes K and V for the new position only and reads the earlier ones from here. A cache holds at most
the context window; past it, generation runs the cropped window whole (`src.model.generation.generate`)."""

from __future__ import annotations

import torch
from torch import Tensor


class KVCache:
    """Preallocated (num_layers, B, h, max_len, d_head) buffers plus how many positions are filled."""

    def __init__(
        self,
        num_layers: int,
        batch_size: int,
        num_heads: int,
        max_len: int,
        d_head: int,
        device: torch.device | str | None = None,
        dtype: torch.dtype = torch.float32,
    ):
        shape = (num_layers, batch_size, num_heads, max_len, d_head)
        self.keys = torch.zeros(shape, device=device, dtype=dtype)
        self.values = torch.zeros(shape, device=device, dtype=dtype)
        self.max_len = max_len
        self.length = 0

    def update(self, layer: int, K: Tensor, V: Tensor) -> tuple[Tensor, Tensor]:
        """Store K, V (B, h, T, d_head) of the new positions; return all keys and values so far."""
        end = self.length + K.shape[2]
        if end > self.max_len:
            raise ValueError(
                f"KV cache holds {self.max_len} positions, asked for {end}: "
                f"crop the sequence to the context window or start a new cache"
            )
        self.keys[layer, :, :, self.length : end] = K
        self.values[layer, :, :, self.length : end] = V
        return self.keys[layer, :, :, :end], self.values[layer, :, :, :end]

    def advance(self, T: int) -> None:
        """Mark T more positions as filled; called once per forward pass, after every layer."""
        self.length += T
