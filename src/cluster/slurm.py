"""A SLURM job pre-empted and requeued: SLURM sends SIGUSR1 before it pre-empts a job; the run saves
last.ckpt and stops between two steps (src/training/callbacks.py, GracefulInterrupt), rank 0 notes the
run directory and asks SLURM to requeue the job, and the job SLURM starts again resumes that run.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from pathlib import Path


def slurm_job() -> str | None:
    """The SLURM job this process runs in (an array task as `<array job>_<task>`), or None outside SLURM."""
    array_job = os.environ.get("SLURM_ARRAY_JOB_ID")
    if array_job and os.environ.get("SLURM_ARRAY_TASK_ID"):
        return f"{array_job}_{os.environ['SLURM_ARRAY_TASK_ID']}"
    return os.environ.get("SLURM_JOB_ID") or None


def requeue(job: str) -> str | None:
    """`scontrol requeue <job>`, as SLURM's pre-emption notice asks of a job that should come back;
    None once done, else why it failed."""

    try:
        done = subprocess.run(["scontrol", "requeue", job], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"scontrol: {err}"
    return None if done.returncode == 0 else " ".join(f"scontrol: {done.stderr or done.stdout}".split())


def requeued_run_file(log_dir: str | Path, job: str) -> Path:
    """Where a pre-empted SLURM job notes its run directory, for the job SLURM starts again to resume."""
    return Path(log_dir) / "slurm" / f"requeued-{job}.txt"


def requeue_preempted(log_dir: str | Path, run_dir: Path, resume: str, rank_zero: bool) -> str:
    """A SLURM job pre-empted (SIGUSR1, last.ckpt saved): requeue it (rank 0), noting its run directory,
    where the job SLURM starts again resumes (requeued_run). Says what was done."""
    job = slurm_job()
    assert job is not None
    if threading.current_thread() is threading.main_thread():
        # SLURM ends a requeued job's tasks (SIGTERM, then SIGKILL after KillWait) to start it again: that
        # SIGTERM, landing while this run exits, is the requeue's own, not a second stop with a line of its own.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if not rank_zero:
        return f"rank 0 requeues SLURM job {job}"
    note = requeued_run_file(log_dir, job)
    note.parent.mkdir(parents=True, exist_ok=True)
    note.write_text(str(run_dir.absolute()))
    failed = requeue(job)
    if failed is not None:
        return f"requeuing SLURM job {job} failed ({failed}): resume with: {resume}"
    return f"requeued SLURM job {job}: it resumes from there when it starts again (as {resume})"


def requeued_run(log_dir: str | Path) -> str | None:
    """The run directory a pre-empted attempt of this SLURM job noted (requeue_preempted), when SLURM
    started the job again (SLURM_RESTART_COUNT > 0), else None."""
    job, restarts = slurm_job(), os.environ.get("SLURM_RESTART_COUNT", "0")
    if job is None or not restarts.isdigit() or int(restarts) == 0:
        return None
    note = requeued_run_file(log_dir, job)
    return note.read_text().strip() if note.is_file() else None
