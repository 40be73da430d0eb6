"""A run's folder: where torchrun's and SLURM's ranks find one run directory, which rank writes,
and the lock that keeps a second training out of it.

The resolvers the configs use for the run's folder and its logs (run_folder, rank_zero, rank_log,
conf/hydra/default.yaml) are registered here; src/run/cli.py imports this module before composing.
"""

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
    """This process's rank as the launcher that started it set it (torchrun: RANK; Lightning's own
    ranks: LOCAL_RANK; srun: SLURM_PROCID; Lightning reads the same variables in this order), or 0.
    Hydra names the run's files from it before Lightning knows the rank."""
    for key in ("RANK", "LOCAL_RANK", "SLURM_PROCID"):
        if os.environ.get(key, "").isdigit():
            return int(os.environ[key])
    return 0


def launched_run() -> tuple[str, str] | None:
    """(launcher, run id) when torchrun or srun started this run as several processes, else None.

    Each of them composes the run directory on its own: they agree on one through an id all share,
    torchrun's --rdzv-id (TORCHELASTIC_RUN_ID) or SLURM's job and step, or, under torchrun without
    --rdzv-id (its id is then 'none'), through torchrun's store (src/cluster/meeting.py).
    """
    if "TORCHELASTIC_RUN_ID" in os.environ and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        return "torchrun", os.environ["TORCHELASTIC_RUN_ID"]
    if "SLURM_JOB_ID" in os.environ and int(os.environ.get("SLURM_NTASKS", "1")) > 1:
        return "slurm", f"{os.environ['SLURM_JOB_ID']}.{os.environ.get('SLURM_STEP_ID', '0')}"
    return None


def run_folder(timestamped: str) -> str:
    """hydra.run.dir below paths.log_dir: torchrun/<rdzv id> or slurm/<job>.<step> for a run of
    several launched processes, so every rank finds the same one; torchrun without --rdzv-id: rank
    0's <date>/<time>, which the others read from torchrun's store; else <date>/<time>."""
    launched = launched_run()
    if launched is None:
        return timestamped
    if launched[1] == "none":  # the ranks agree through torchrun's store (the cluster wing)
        from src.cluster.meeting import agreed_folder, torchrun_store_address

        return agreed_folder(timestamped) if torchrun_store_address() else timestamped
    return f"{launched[0]}/{launched[1]}"


# SLURM's step ids that are not an srun step: the batch script, the external container, salloc's shell.
NOT_SRUN_STEPS = {"4294967294", "4294967295", "4294967293"}


def started_by_srun() -> bool:
    """Whether srun started this process as one task of a job step: srun sets SLURM_STEP_ID for its
    tasks; an sbatch script or salloc's shell has none (or a step id of its own above 2**32 - 4)."""
    step = os.environ.get("SLURM_STEP_ID", os.environ.get("SLURM_STEPID"))
    return step is not None and step not in NOT_SRUN_STEPS


def check_launched_run(run_dir_typed: bool) -> None:
    """Ranks that could never meet: SLURM's variables promising tasks that srun did not start (Lightning
    would wait forever for them), and torchrun without --rdzv-id whose rendezvous leaves its workers
    no agent store to agree on a run directory through (torchrun's static and c10d ones have one)."""
    tasks = os.environ.get("SLURM_NTASKS", "1")
    interactive = os.environ.get("SLURM_JOB_NAME") in ("bash", "interactive")  # Lightning's own opt-out
    if tasks.isdigit() and int(tasks) > 1 and not interactive and not started_by_srun():
        raise ValueError(
            f"SLURM promises {tasks} tasks (SLURM_NTASKS={tasks}), but srun did not start this process, so the "
            f"other ranks would never come and the run would wait for them forever: start it with "
            f"`srun python -m src.train ...` inside the job (or --ntasks=1 for one process)"
        )
    launched = launched_run()
    if launched is None or launched[1] != "none" or run_dir_typed:
        return
    from src.cluster.meeting import torchrun_store_address

    if torchrun_store_address() is None:
        raise ValueError(
            "torchrun started this run without --rdzv-id and without a store of its own for its workers, so its "
            "ranks cannot agree on one run directory: "
            "give every torchrun the same --rdzv-id=<name> (the run goes to outputs/torchrun/<name>), "
            "or the same hydra.run.dir=<folder>"
        )


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
    """Lock a named run directory once the run is checked, before Hydra writes its .hydra/ there:
    of two runs started together, the second is refused before it rewrites the first's config."""
    HELD[Path(run_dir).absolute()] = lock_run_dir(run_dir)


@contextmanager
def hold_run_dir(run_dir: str | Path) -> Iterator[None]:
    """Hold the run directory's lock while training (taken now, or by take_run_dir), so a second
    run there is refused."""
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
