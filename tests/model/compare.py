"""One comparison for the tests the exercises are graded by: a mismatch prints both tensors, labelled, so that a
learner sees which one their code computed."""

from __future__ import annotations

import torch
from torch import Tensor


def assert_close(yours: Tensor, expected: Tensor, **tolerance: float) -> None:
    """torch.testing.assert_close (shape, dtype and values), its message followed by "yours:" and "expected:"."""

    def message(found: str) -> str:
        return f"{found}\nyours (the code under test):\n{yours}\nexpected:\n{expected}"

    torch.testing.assert_close(yours, expected, msg=message, **tolerance)
