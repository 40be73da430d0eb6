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
        try:
            with open(partial, "wb") as f:
                f.write(buffer.getbuffer())
                f.flush()
                os.fsync(f.fileno())
            os.replace(partial, path)
        except OSError as err:  # a full or read-only disk: say where, what it needs, and what is kept
            raise CheckpointWriteError(err.errno, unwritten(path, err, buffer.getbuffer().nbytes)) from None
    finally:
        partial.unlink(missing_ok=True)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)  # make the rename itself durable
    finally:
        os.close(directory)


class CheckpointWriteError(OSError):
    """A checkpoint that could not be written, its message naming the file, its size and what is kept."""


def what_is_kept(directory: Path) -> str:
    """The newest checkpoint in `directory` and how to resume from it, after a failed write."""
    kept = sorted(directory.glob("*.ckpt"), key=lambda p: p.stat().st_mtime)
    if not kept:
        return "no checkpoint was written before it: run again"
    return f"the newest checkpoint, {kept[-1]}, is intact: resume with python -m src.train ckpt_path={kept[-1]}"


def unwritten(path: Path, err: OSError, size: int) -> str:
    """Why a checkpoint of `size` bytes was not written to `path`, and the newest one kept beside it."""
    return (
        f"cannot write the checkpoint {path} ({err.strerror or err}; it needs {size / 1e6:,.1f} MB free there): "
        f"{what_is_kept(path.parent)} once there is room, or choose another hydra.run.dir"
    )


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning's torch checkpoint IO, with atomic_torch_save for every write."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None) -> None:
        atomic_torch_save(checkpoint, path)
