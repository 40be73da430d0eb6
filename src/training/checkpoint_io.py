"""Checkpoint writes that are atomic: a kill at any moment leaves the previous file intact."""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.plugins.io import TorchCheckpointIO


def atomic_torch_save(obj: Any, path: str | os.PathLike) -> None:
    """torch.save to a temp file beside `path`, fsync, then rename over it.

    The rename is atomic within one directory, so readers see the old checkpoint or the new
    one, never half of either. A leftover `*.partial-<pid>` from a kill is never mistaken for
    a checkpoint (it does not end in .ckpt).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    partial = path.with_name(f"{path.name}.partial-{os.getpid()}")
    try:
        with open(partial, "wb") as f:
            f.write(buffer.getbuffer())
            f.flush()
            os.fsync(f.fileno())
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)  # make the rename itself durable
    finally:
        os.close(directory)


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning's torch checkpoint IO, with atomic_torch_save for every write."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None) -> None:
        atomic_torch_save(checkpoint, path)
