"""A run's folder: where torchrun's and SLURM's ranks find one run directory, which rank writes
(the resolvers conf/hydra/default.yaml uses, registered on import), and the lock that keeps a second
training out of it."""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from omegaconf import OmegaConf

from src.rules import ConfigError, RunDirInUse

LOCK = ".lock"


def launched_rank() -> int:
    """This process's rank as its launcher set it (RANK, LOCAL_RANK, SLURM_PROCID, in Lightning's
    order), or 0: Hydra names the run's files before Lightning knows the rank."""
    for key in ("RANK", "LOCAL_RANK", "SLURM_PROCID"):
        if os.environ.get(key, "").isdigit():
            return int(os.environ[key])
    return 0


def launched_run() -> tuple[str, str] | None:
    """(launcher, run id) when torchrun or srun started this run as several processes, else None: an
    id they all share (torchrun's --rdzv-id, 'none' without one; SLURM's job and step)."""
    if "TORCHELASTIC_RUN_ID" in os.environ and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        return "torchrun", os.environ["TORCHELASTIC_RUN_ID"]
    if "SLURM_JOB_ID" in os.environ and int(os.environ.get("SLURM_NTASKS", "1")) > 1:
        return "slurm", f"{os.environ['SLURM_JOB_ID']}.{os.environ.get('SLURM_STEP_ID', '0')}"
    return None


def run_folder(timestamped: str) -> str:
    """hydra.run.dir below paths.log_dir: torchrun/<rdzv id> or slurm/<job>.<step>, the same for every
    rank; torchrun without --rdzv-id: rank 0's <date>/<time>, shared through torchrun's store."""
    launched = launched_run()
    if launched is None:
        return timestamped
    if launched[1] == "none":  # the ranks agree through torchrun's store (the cluster wing)
        from src.cluster.meeting import agreed_folder, torchrun_store_address

        return agreed_folder(timestamped) if torchrun_store_address() else timestamped
    return f"{launched[0]}/{launched[1]}"


OmegaConf.register_new_resolver("run_folder", run_folder, replace=True)
# Only rank 0 writes the run's .hydra/ and train.log; rank k logs to train_rank_k.log.
OmegaConf.register_new_resolver("rank_zero", lambda value: value if launched_rank() == 0 else None, replace=True)
OmegaConf.register_new_resolver(
    "rank_log", lambda name: name if launched_rank() == 0 else f"{name}_rank_{launched_rank()}", replace=True
)


def lock(fd: int, run_dir: str | Path) -> None:
    """Take the run directory's lock on fd, or refuse: another live training holds it."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise RunDirInUse(
            f"another training is running in {run_dir}: wait for it to end, or choose another hydra.run.dir"
        ) from None


def check_not_in_use(run_dir: str | Path) -> None:
    """Refuse a run directory that another live training holds (its lock file is locked)."""
    path = Path(run_dir) / LOCK
    if path.is_file():
        fd = os.open(path, os.O_RDONLY)
        try:
            lock(fd, run_dir)
        finally:
            os.close(fd)  # closing releases a lock this probe took


HELD: dict[Path, int] = {}  # run directories this process locked before Hydra wrote into them


def lock_run_dir(run_dir: str | Path) -> int:
    path = Path(run_dir)
    path.mkdir(parents=True, exist_ok=True)
    fd = os.open(path / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        lock(fd, run_dir)
    except ConfigError:
        os.close(fd)
        raise
    return fd


def take_run_dir(run_dir: str | Path) -> None:
    """Lock a named run directory once the run is checked, before Hydra writes its .hydra/ there."""
    HELD[Path(run_dir).absolute()] = lock_run_dir(run_dir)


@contextmanager
def hold_run_dir(run_dir: str | Path) -> Iterator[None]:
    """Hold the run directory's lock while training (taken now, or by take_run_dir)."""
    fd = HELD.pop(Path(run_dir).absolute(), None)
    if fd is None:
        fd = lock_run_dir(run_dir)
    try:
        try:
            yield
        finally:
            (Path(run_dir) / LOCK).unlink(missing_ok=True)  # a finished run leaves none (kill -9: unlocked)
    finally:
        os.close(fd)  # the kernel drops the lock with the descriptor, also on kill -9
