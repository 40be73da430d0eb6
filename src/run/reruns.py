"""A command typed again: `ckpt_path=<run>` continues that run with its own overrides; the same
command into its interrupted run's hydra.run.dir, or a requeued SLURM job, resumes it; a new run into
a folder that holds another is refused."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from omegaconf import DictConfig

from src.rules import ConfigError
from src.run import record, rundir
from src.run.cli import is_multirun, quoted

PROJECT_OUTPUTS = Path(__file__).resolve().parents[2] / "outputs"


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
    log_dir = log_dirs[-1] if log_dirs else PROJECT_OUTPUTS
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
    previous = [o for o in saved if not o.startswith(("ckpt_path=", "hydra."))]
    typed = [a for a in argv if not a.startswith("ckpt_path=")]
    return [*previous, *typed, quoted("ckpt_path", checkpoint), quoted("hydra.run.dir", run_dir)]


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
    if run_dir is None or overwrite or rundir.launched_rank() != 0:
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
