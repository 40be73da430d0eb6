"""A DDP rank whose peer died (killed, crashed, its machine down) ends in one line naming the lost
rank, the step, and what is kept, instead of gloo's or NCCL's traceback, or instead of being killed
silently by Lightning's watch of the ranks it started (RankWatch)."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import lightning as L
import torch.distributed

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


def lost_rank(
    trainer: Any, run_dir: Path, err: RuntimeError | None = None, rank: int | None = None, how: str = ""
) -> str:
    """One line for a rank whose peer died under DDP: which rank was lost, at which step, what is kept. From
    gloo's or NCCL's error (`err`), or from rank 0's own watch of the ranks it started (`rank`, `how`)."""
    world, me = trainer.world_size, trainer.global_rank
    if rank is None:
        who = f"rank {1 - me} of 2" if world == 2 else f"another of the {world} ranks (this is rank {me})"
    else:
        who = f"rank {rank} of {world}"
    cause = how or next(words for words in PEER_LOST if words in str(err))
    last = run_dir / "checkpoints" / "last.ckpt"
    kept = (
        f"the newest checkpoint, {last}, is intact; resume with: python -m src.train ckpt_path={run_dir}"
        if last.is_file()
        else "no checkpoint was written yet: run the command again to start over"
    )
    return f"{who} ended at step {trainer.global_step} (its process is gone: {cause}): {kept}"


class RankWatch(L.Callback):
    """Rank 0 ends in that one line the moment a rank it started dies. Lightning's own watch of the ranks it
    starts SIGKILLs rank 0 within 5 s of a child's death, which under load came before gloo told rank 0 that
    its peer was gone: exit 137 and no line. The ranks' process ids are gathered once; SIGCHLD then looks at
    the dead child without reaping it (WNOWAIT), so Lightning's watch still sees it."""

    def __init__(self) -> None:
        self.previous: Any = None  # rank 0's SIGCHLD handler before this one

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.world_size == 1:  # one process: no rank to lose
            return
        pids: list[int] = [0] * trainer.world_size
        torch.distributed.all_gather_object(pids, os.getpid())
        if trainer.global_rank != 0:
            return

        def child_ended(signum: int, frame: object) -> None:
            for rank, pid in enumerate(pids):
                try:
                    info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
                except ChildProcessError:  # not a child of this process (torchrun, srun), or itself
                    continue
                if info is None or info.si_code not in (os.CLD_KILLED, os.CLD_DUMPED):
                    continue  # alive, or ended as a rank ends (a stop signal makes every rank exit with its line)
                how = f"killed by {signal.Signals(info.si_status).name}"
                line = lost_rank(trainer, Path(trainer.default_root_dir), rank=rank, how=how)
                os.write(2, f"error: {line}\n".encode())
                os._exit(1)  # at once: unwinding would wait in a collective for the rank that is gone

        self.previous = signal.signal(signal.SIGCHLD, child_ended)

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if self.previous is not None:
            signal.signal(signal.SIGCHLD, self.previous)  # the next job of a sweep starts other ranks
