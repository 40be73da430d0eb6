"""Context windows (x, y) cut from the encoded text by index arithmetic, never materialised.

For a window starting at s:  x = data[s : s+T],  y = data[s+1 : s+T+1]   (y is x shifted by one)

`data` is a 1-D numpy array of token ids, usually the memory-mapped token cache: a batch
reads only the B * (T + 1) ids it needs, so memory does not grow with the corpus.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset

from src.rules import window_fits

IGNORE = -1  # target id of positions that are not scored (see ValidationWindows)
MASK64 = (1 << 64) - 1


def windows_at(data: np.ndarray, starts: Tensor, T: int) -> tuple[Tensor, Tensor]:
    """starts: (B,) -> x, y: (B, T) int64, gathered in one indexing operation."""
    chunk = torch.from_numpy(data[starts.numpy()[:, None] + np.arange(T + 1)].astype(np.int64))  # (B, T + 1)
    return chunk[:, :-1], chunk[:, 1:]


def stream_seed(seed: int, rank: int, k: int) -> int:
    """One number per (seed, rank, batch or epoch index): the key of that batch's randomness."""
    return (seed * 65_537 + rank) * 1_000_000_007 + k


class RandomWindowBatches:
    """An endless stream of training batches of B windows at random places in `data`.

    Batch k depends only on (seed, rank, k): resuming at batch k replays exactly the batches an
    uninterrupted run would have seen, and each DDP rank draws different windows.
    """

    def __init__(self, data: np.ndarray, T: int, batch_size: int, seed: int = 0, rank: int = 0, start_batch: int = 0):
        window_fits("training", len(data), T)
        self.data, self.T, self.batch_size = data, T, batch_size
        self.seed, self.rank, self.start_batch = seed, rank, start_batch

    def starts(self, k: int) -> Tensor:
        generator = torch.Generator().manual_seed(stream_seed(self.seed, self.rank, k))
        return torch.randint(0, len(self.data) - self.T, (self.batch_size,), generator=generator)

    def batch(self, k: int) -> tuple[Tensor, Tensor]:
        return windows_at(self.data, self.starts(k), self.T)

    def __iter__(self) -> Iterator[tuple[Tensor, Tensor]]:
        return map(self.batch, itertools.count(self.start_batch))


def _mix(x: np.ndarray, key: int) -> np.ndarray:
    """A 64-bit hash of each x under `key` (splitmix64's finaliser); uint64 arithmetic wraps."""
    x = (x + np.uint64(key & MASK64)) * np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def shuffled(i: np.ndarray, n: int, key: int, rounds: int = 4) -> np.ndarray:
    """A pseudo-random permutation of 0..n-1, evaluated at positions i: shuffled(i) for i < n.

    A Feistel network permutes the 2h-bit numbers (the smallest even width >= n's); values that
    land at n or beyond are sent through it again ("cycle walking") until they fall below n,
    which keeps it a bijection on 0..n-1. It needs O(len(i)) memory, not O(n): an epoch over a
    billion windows never builds a billion-entry permutation.
    """
    half = max(1, ((n - 1).bit_length() + 1) // 2)
    low = np.uint64((1 << half) - 1)
    out = i.astype(np.uint64)
    todo = np.ones(len(out), dtype=bool)
    while todo.any():
        x = out[todo]
        left, right = x >> np.uint64(half), x & low
        for r in range(rounds):
            left, right = right, left ^ (_mix(right, key * 4 + r) & low)
        out[todo] = (left << np.uint64(half)) | right
        todo = out >= np.uint64(n)
    return out.astype(np.int64)


class EpochWindowBatches(RandomWindowBatches):
    """Every window start exactly once per epoch, in a seeded shuffled order that changes each epoch.

    The n = len(data) - T starts of an epoch are in the order shuffled(0..n-1); rank r of W takes its
    positions r, r + W, r + 2W, ..., B at a time (the epoch's last batch: what is left). Batch k depends
    only on (seed, rank, k), so a resumed run continues mid-epoch exactly where it stopped.
    """

    def __init__(
        self,
        data: np.ndarray,
        T: int,
        batch_size: int,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
        start_batch: int = 0,
    ):
        super().__init__(data, T, batch_size, seed, rank, start_batch)
        self.world_size = world_size
        self.num_windows = len(data) - T
        per_rank = -(-self.num_windows // world_size)
        self.batches_per_epoch = -(-per_rank // batch_size)

    def starts(self, k: int) -> Tensor:
        """The window starts of batch k: (B,) or fewer at the end of an epoch."""
        epoch, i = divmod(k, self.batches_per_epoch)
        positions = self.rank + self.world_size * (i * self.batch_size + np.arange(self.batch_size))
        positions = positions[positions < self.num_windows]
        return torch.from_numpy(shuffled(positions, self.num_windows, stream_seed(self.seed, 0, epoch)))


class ValidationWindows(Dataset):
    """Non-overlapping windows that score every position of the split exactly once.

    Windows start at 0, T, 2T, ... If the split does not divide into whole windows, one last
    window ends at the split's end and its already-scored targets are set to IGNORE. The mean
    loss over all scored positions is then the exact loss of the whole split.
    """

    def __init__(self, data: np.ndarray, T: int, rank: int = 0, world_size: int = 1):
        window_fits("validation", len(data), T)
        self.data, self.T = data, T
        n_targets = len(data) - 1
        self.whole = n_targets // T  # windows at 0, T, 2T, ...
        self.tail_scored = n_targets - self.whole * T  # targets no whole window reached
        self.last_start = n_targets - T
        num_windows = self.whole + (1 if self.tail_scored else 0)
        self.shard = np.arange(rank, num_windows, world_size)  # per rank, no padding: nothing counts twice

    def __len__(self) -> int:
        return len(self.shard)

    def __getitem__(self, i: int) -> tuple[Tensor, Tensor]:
        x, y = self.__getitems__([i])
        return x[0], y[0]

    def __getitems__(self, indices: list[int]) -> tuple[Tensor, Tensor]:
        """Windows `indices` as one batch x, y (B, T), gathered in one operation (the DataLoader calls it)."""
        windows = self.shard[indices]
        starts = np.where(windows < self.whole, windows * self.T, self.last_start)
        x, y = windows_at(self.data, torch.from_numpy(starts), self.T)
        tail = torch.from_numpy(windows == self.whole)
        if tail.any():  # the tail window: its first targets were scored already
            y = y.clone()  # y is a view of the same ids as x
            y[tail, : self.T - self.tail_scored] = IGNORE
        return x, y


def already_a_batch(batch: tuple[Tensor, Tensor]) -> tuple[Tensor, Tensor]:
    """The DataLoader's collate_fn for ValidationWindows: __getitems__ returned a whole batch."""
    return batch


def validation_batches(windows: ValidationWindows, batch_size: int, num_workers: int = 0) -> DataLoader:
    """Batches of consecutive validation windows, each gathered at once (not window by window)."""
    return DataLoader(windows, batch_size, shuffle=False, num_workers=num_workers, collate_fn=already_a_batch)
