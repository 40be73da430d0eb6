"""A run's folder: one for all torchrun/SLURM ranks, rank 0 writing (conf/hydra/default.yaml's resolvers), its
lock, and a command typed again into it: continued (`ckpt_path=<run>`, an interrupted run's own command, a requeued
SLURM job), or refused where it would overwrite another run."""

from __future__ import annotations

import fcntl
import os
import shutil
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import OverrideType
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf

from src.rules import ConfigError, RunDirInUse
from src.run import record

PROJECT_ROOT = Path(__file__).resolve().parents[2]
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
# hydra/launcher=slurm's request: `${on_gpu:${trainer.accelerator},<GPU trainers'>,<CPU trainers'>}`
# (auto counts as a GPU: the cluster's nodes, not the login node, decide what it finds).
OmegaConf.register_new_resolver(
    "on_gpu", lambda accelerator, gpu, cpu: cpu if str(accelerator) == "cpu" else gpu, replace=True
)
OmegaConf.register_new_resolver("times", lambda a, b: a * b, replace=True)
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


# ---------------------------------------------------------------------------- a command typed again


def quoted(key: str, value: str | Path) -> str:
    """`key='value'` in Hydra's syntax, so a path with spaces or other characters stays one value."""
    text = str(value).replace("'", "\\'")
    return f"{key}='{text}'"


def pinned_run_dir(argv: list[str], run_dir: str) -> list[str]:
    """The command line with the run directory the checks met, not one of a later ${now:...}."""
    return [*(a for a in argv if not a.startswith("hydra.run.dir=")), quoted("hydra.run.dir", run_dir)]


def is_multirun(argv: list[str]) -> bool:
    """-m, or a config that sets Hydra's mode to MULTIRUN (hparams_search=optuna does)."""
    return any(a in ("-m", "--multirun") or a.startswith(("hparams_search=", "hydra.mode=MULTIRUN")) for a in argv)


def typed_value(override: str) -> str:
    """The value of `key=value` as Hydra reads it (quotes removed), or as typed if Hydra cannot."""
    try:
        return str(OverridesParser.create().parse_overrides([override])[0].value())
    except HydraException:
        return override.split("=", 1)[1]  # unquoted spaces: the path as the user typed it


def typed_run_dir(argv: list[str]) -> Path | None:
    run_dirs = [typed_value(a) for a in argv if a.startswith("hydra.run.dir=")]
    return Path(run_dirs[-1]) if run_dirs else None


def continue_run(argv: list[str]) -> list[str]:
    """`ckpt_path=<run dir, its checkpoint, or last>` continues that run, in its directory: its own
    overrides (.hydra/overrides.yaml) first, those typed now after them, winning as in Hydra."""
    log_dirs = [a.split("=", 1)[1] for a in argv if a.startswith("paths.log_dir=")]
    log_dir = log_dirs[-1] if log_dirs else PROJECT_ROOT / "outputs"
    given = [typed_value(a) for a in argv if a.startswith("ckpt_path=")]
    resumed = None if given or is_multirun(argv) else requeued_run(log_dir) or rerun_to_resume(argv)
    if resumed is not None:  # the same command again: a requeued SLURM job, or a rerun into its run directory
        argv = [*(a for a in argv if not a.startswith("hydra.run.dir=")), quoted("ckpt_path", resumed)]
        given = [str(resumed)]
    if not given or given[-1] in ("null", "") or is_multirun(argv) or any("hydra.run.dir=" in a for a in argv):
        return argv
    from src.training.checkpoint import CheckpointError, find_checkpoint  # a run from scratch reads none

    try:
        checkpoint = find_checkpoint(given[-1], log_dir, prefer="last")
    except CheckpointError:
        return argv  # the plan reports it
    run_dir = checkpoint.parent.parent
    saved = record.saved_overrides(run_dir)
    if checkpoint.parent.name != "checkpoints" or saved is None:
        return argv
    typed = [a for a in argv if not a.startswith("ckpt_path=")]
    previous = not_typed_again([o for o in saved if not o.startswith(("ckpt_path=", "hydra."))], typed)
    return [*previous, *typed, quoted("ckpt_path", checkpoint), quoted("hydra.run.dir", run_dir)]


def not_typed_again(previous: list[str], typed: list[str]) -> list[str]:
    """The run's own overrides less those typed again alike (`+key=...`, `~key`), which Hydra refuses twice:
    a requeued SLURM job runs its first command again, `+callbacks...` and all."""
    parser = OverridesParser.create()
    try:
        again = {(o.key_or_group, o.package, o.type) for o in parser.parse_overrides(typed)}
        parsed = parser.parse_overrides(previous)
    except HydraException:
        return previous  # the command's checks name the typo
    twice = {OverrideType.ADD, OverrideType.DEL}
    return [
        p
        for p, o in zip(previous, parsed, strict=True)
        if o.type not in twice or (o.key_or_group, o.package, o.type) not in again
    ]


def requeued_run(log_dir: str | Path) -> str | None:
    """The run a pre-empted SLURM job noted, when SLURM started this job again."""
    if "SLURM_JOB_ID" not in os.environ:
        return None
    from src.cluster.slurm import requeued_run, slurm_job

    run = requeued_run(log_dir)
    if run is not None:
        print(f"SLURM requeued job {slurm_job()}: resuming its run {run}", file=sys.stderr)
    return run


def rerun_to_resume(argv: list[str]) -> Path | None:
    """The hydra.run.dir typed again that holds this command's interrupted run (the same
    hyperparameters), to resume rather than overwrite from step 0; overwrite=true starts over."""
    run_dir = typed_run_dir(argv)
    overwrite = any(typed_value(a).lower() == "true" for a in argv if a.lstrip("+").startswith("overwrite="))
    if run_dir is None or overwrite or launched_rank() != 0:
        return None
    if record.run_state(run_dir) != "interrupted" or not record.same_job(record.saved_overrides(run_dir), argv):
        return None
    print(
        f"hydra.run.dir={run_dir} holds an interrupted run of this command: resuming it from its last.ckpt "
        f"(overwrite=true starts over)",
        file=sys.stderr,
    )
    return run_dir


def check_rerun(run_dir: Path, cfg: DictConfig) -> None:
    """Refuse a new run into a directory holding a finished run, or an interrupted one of other
    hyperparameters; overwrite=true removes its checkpoints, events and result instead."""
    state = record.run_state(run_dir)
    if state is None or cfg.ckpt_path is not None:
        return
    if cfg.overwrite:
        for name in ("checkpoints", "tensorboard"):
            shutil.rmtree(run_dir / name, ignore_errors=True)
        for name in (record.RESULT, "explore.html"):
            (run_dir / name).unlink(missing_ok=True)
        return
    done = record.read_result(run_dir) or {}
    if state == "finished":
        loss = done.get("best_val_loss")
        what = f"a finished run ({done.get('steps')} steps" + (f", best val loss {loss:.4f})" if loss else ")")
        more = f"python -m src.train ckpt_path={run_dir} trainer.max_steps=<more>"
    else:
        theirs = " ".join(o for o in record.saved_overrides(run_dir) or [] if not o.startswith("hydra."))
        what = f"an interrupted run of other settings ({theirs or 'the defaults'})"
        more = f"python -m src.train ckpt_path={run_dir} (settings typed after it win)"
    raise ConfigError(
        f"hydra.run.dir={run_dir} holds {what}: kept; continue it with {more}, choose another "
        f"hydra.run.dir, or add overwrite=true to replace it"
    )
