"""A DDP rank whose peer died (killed, crashed, its machine down) ends in one line naming the lost
rank, the step, and what is kept, instead of gloo's or NCCL's traceback."""

from __future__ import annotations

from pathlib import Path
from typing import Any

# What gloo and NCCL say when the process of another rank is gone.
PEER_LOST = (
    "Connection closed by peer",
    "Connection reset by peer",
    "Broken pipe",
    "Socket Timeout",
    "communicator was aborted",
)


def peer_lost(err: BaseException) -> bool:
    return isinstance(err, RuntimeError) and any(words in str(err) for words in PEER_LOST)


def lost_rank(trainer: Any, run_dir: Path, err: RuntimeError) -> str:
    """One line for a rank whose peer died under DDP: which rank was lost, at which step, what is kept."""
    world, me = trainer.world_size, trainer.global_rank
    who = f"rank {1 - me} of 2" if world == 2 else f"another of the {world} ranks (this is rank {me})"
    cause = next(words for words in PEER_LOST if words in str(err))
    last = run_dir / "checkpoints" / "last.ckpt"
    kept = (
        f"the newest checkpoint, {last}, is intact; resume with: python -m src.train ckpt_path={run_dir}"
        if last.is_file()
        else "no checkpoint was written yet: run the command again to start over"
    )
    return f"{who} ended at step {trainer.global_step} (its process is gone: {cause}): {kept}"
