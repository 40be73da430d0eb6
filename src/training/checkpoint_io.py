"""Checkpoint writes that are atomic: a kill at any moment leaves the previous file intact."""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.plugins.io import TorchCheckpointIO


def remove_leftovers(directory: Path) -> None:
    """Delete `*.partial-<pid>` files that a killed writer left behind (its process is gone)."""
    for partial in directory.glob("*.partial-*"):
        pid = partial.name.rsplit("-", 1)[1]
        if pid.isdigit() and int(pid) != os.getpid() and not Path(f"/proc/{pid}").exists():
            partial.unlink(missing_ok=True)


def atomic_torch_save(obj: Any, path: str | os.PathLike) -> None:
    """torch.save to a temp file beside `path`, fsync, then rename over it.

    The rename is atomic within one directory, so readers see the old checkpoint or the new
    one, never half of either. A leftover `*.partial-<pid>` from a kill is never mistaken for
    a checkpoint (it does not end in .ckpt), and the next save removes it.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_leftovers(path.parent)
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
        try:
            atomic_torch_save(checkpoint, path)
        except OSError as err:  # a full or read-only disk: say where, and that nothing was lost
            raise OSError(
                err.errno,
                f"cannot write the checkpoint {path} ({err.strerror or err}): free space there or choose another "
                f"paths.log_dir; the checkpoint that was there before is intact",
            ) from None
