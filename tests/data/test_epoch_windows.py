"""Epoch sampling, the notes' way of drawing windows: every window once per epoch, in a new order."""

import numpy as np
import pytest
import torch

from src.data.windows import EpochWindowBatches, shuffled


def epoch_starts(stream: EpochWindowBatches, epoch: int) -> list[int]:
    n = stream.batches_per_epoch
    return [s for k in range(epoch * n, (epoch + 1) * n) for s in stream.starts(k).tolist()]


@pytest.mark.parametrize("n", [1, 2, 17, 1000, 4097])
def test_the_shuffle_is_a_permutation_of_every_size(n):
    order = shuffled(np.arange(n), n, key=5)
    assert sorted(order.tolist()) == list(range(n))
    if n >= 1000:
        assert not np.array_equal(order, np.arange(n)) and abs(np.corrcoef(order, np.arange(n))[0, 1]) < 0.1


def test_an_epoch_visits_every_window_once_in_a_new_order_each_epoch():
    data = np.arange(107)
    stream = EpochWindowBatches(data, T=4, batch_size=8, seed=3)
    first, second = epoch_starts(stream, 0), epoch_starts(stream, 1)
    assert sorted(first) == sorted(second) == list(range(107 - 4))  # every start, once
    assert first != second and first != sorted(first)
    x, y = stream.batch(0)
    assert torch.equal(x[:, 0], stream.starts(0)) and torch.equal(y[:, :-1], x[:, 1:])
    assert len(stream.starts(stream.batches_per_epoch - 1)) == (107 - 4) % 8  # the rest, not padded


def test_epoch_batches_resume_exactly_mid_epoch():
    data = np.arange(500)
    fresh = iter(EpochWindowBatches(data, 8, 16, seed=9))
    batches = [next(fresh) for _ in range(40)]  # past the end of the first epoch (31 batches)
    resumed = iter(EpochWindowBatches(data, 8, 16, seed=9, start_batch=25))
    for k in range(25, 40):
        assert torch.equal(next(resumed)[0], batches[k][0])


def test_ddp_ranks_take_disjoint_shards_that_cover_the_epoch():
    data = np.arange(250)
    ranks = [EpochWindowBatches(data, 5, 7, seed=1, rank=r, world_size=3) for r in range(3)]
    shards = [set(epoch_starts(r, 0)) for r in ranks]
    assert all(len(epoch_starts(r, 0)) == len(s) for r, s in zip(ranks, shards, strict=True))
    assert not (shards[0] & shards[1] or shards[0] & shards[2] or shards[1] & shards[2])
    assert set().union(*shards) == set(range(245))
