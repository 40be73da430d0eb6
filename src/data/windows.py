"""Context windows (x, y) cut from one encoded tensor by index arithmetic, never materialised.

For a window starting at s:  x = data[s : s+T],  y = data[s+1 : s+T+1]   (y is x shifted by one)
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch import Tensor
from torch.utils.data import Dataset

IGNORE = -1  # target id of positions that are not scored (see ValidationWindows)


def windows_at(data: Tensor, starts: Tensor, T: int) -> tuple[Tensor, Tensor]:
    """starts: (B,) -> x, y: (B, T) int64, gathered in one indexing operation."""
    chunk = data[starts.unsqueeze(1) + torch.arange(T + 1)].long()  # (B, T + 1)
    return chunk[:, :-1], chunk[:, 1:]


def check_fits(split: str, length: int, T: int) -> None:
    if length < T + 1:
        raise ValueError(
            f"context_window ({T}) is longer than the {split} split ({length} characters): "
            f"lower model.context_window or give the {split} split more text (data.val_fraction)"
        )


class RandomWindowBatches:
    """An endless stream of training batches of B windows at random places in `data`.

    Batch k depends only on (seed, rank, k): resuming at batch k replays exactly the batches an
    uninterrupted run would have seen, and each DDP rank draws different windows.
    """

    def __init__(self, data: Tensor, T: int, batch_size: int, seed: int = 0, rank: int = 0, start_batch: int = 0):
        check_fits("training", len(data), T)
        self.data, self.T, self.batch_size = data, T, batch_size
        self.seed, self.rank, self.start_batch = seed, rank, start_batch

    def batch(self, k: int) -> tuple[Tensor, Tensor]:
        generator = torch.Generator().manual_seed((self.seed * 65_537 + self.rank) * 1_000_000_007 + k)
        starts = torch.randint(0, len(self.data) - self.T, (self.batch_size,), generator=generator)
        return windows_at(self.data, starts, self.T)

    def __iter__(self) -> Iterator[tuple[Tensor, Tensor]]:
        k = self.start_batch
        while True:
            yield self.batch(k)
            k += 1


class ValidationWindows(Dataset):
    """Non-overlapping windows that score every position of the split exactly once.

    Windows start at 0, T, 2T, ... If the split does not divide into whole windows, one last
    window ends at the split's end and its already-scored targets are set to IGNORE. The mean
    loss over all scored positions is then the exact loss of the whole split.
    """

    def __init__(self, data: Tensor, T: int, rank: int = 0, world_size: int = 1):
        check_fits("validation", len(data), T)
        self.data, self.T = data, T
        n_targets = len(data) - 1
        self.starts = list(range(0, n_targets - T + 1, T))
        self.tail_scored = n_targets - len(self.starts) * T  # targets no whole window reached
        if self.tail_scored:
            self.starts.append(n_targets - T)
        self.shard = range(rank, len(self.starts), world_size)  # per rank, no padding: nothing counts twice

    def __len__(self) -> int:
        return len(self.shard)

    def __getitem__(self, i: int) -> tuple[Tensor, Tensor]:
        window = self.shard[i]
        x, y = windows_at(self.data, torch.tensor([self.starts[window]]), self.T)
        x, y = x[0], y[0].clone()
        if self.tail_scored and window == len(self.starts) - 1:
            y[: self.T - self.tail_scored] = IGNORE
        return x, y
