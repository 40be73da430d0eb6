"""The signals that stop a run, once for every place that handles them (a run, a sweep, its workers).

SIGINT is Ctrl-C; SIGTERM what `kill`, a scheduler or a container stop sends; SIGHUP what a closed
terminal or a dropped ssh session sends; SIGUSR1 what SLURM sends before it pre-empts a job (and
what a user may send). Each stops training the same way: between two steps, last.ckpt saved, one
line with the command that resumes. Imports nothing heavy: src/train.py installs its handler for
them before it imports torch.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1)


def exit_status(signal_name: str) -> int:
    """128 + the signal's number (130 after SIGINT, 143 after SIGTERM, 129 after SIGHUP), as a shell
    reports a process the signal ended; `signal_name` may be qualified ("second SIGINT"). 143 for a
    stop that no signal caused (a sweep's main process ended)."""
    name = signal_name.split()[-1] if signal_name else ""
    number = signal.Signals[name] if name in signal.Signals.__members__ else signal.SIGTERM
    return 128 + number


def stop_outside_training(signum: int, frame: object) -> None:
    """Before and after training (loading, the final sample, between sweep jobs) nothing is unsaved:
    one line, and the process ends at once (an exception could be swallowed where the signal lands,
    e.g. in a finalizer)."""
    what = "interrupted" if signum == signal.SIGINT else signal.Signals(signum).name
    os.write(2, f"error: {what} outside training (where Ctrl-C saves last.ckpt first): stopped\n".encode())
    os._exit(128 + signum)


def slurm_job() -> str | None:
    """The SLURM job this process runs in (an array task as `<array job>_<task>`), or None outside SLURM."""
    array_job = os.environ.get("SLURM_ARRAY_JOB_ID")
    if array_job and os.environ.get("SLURM_ARRAY_TASK_ID"):
        return f"{array_job}_{os.environ['SLURM_ARRAY_TASK_ID']}"
    return os.environ.get("SLURM_JOB_ID") or None


def requeue(job: str) -> str | None:
    """`scontrol requeue <job>`, as SLURM's pre-emption notice asks of a job that should come back;
    None once done, else why it failed."""
    import subprocess

    try:
        done = subprocess.run(["scontrol", "requeue", job], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"scontrol: {err}"
    return None if done.returncode == 0 else " ".join(f"scontrol: {done.stderr or done.stdout}".split())


def requeued_run_file(log_dir: str | Path, job: str) -> Path:
    """Where a pre-empted SLURM job notes its run directory, for the job SLURM starts again to resume."""
    return Path(log_dir) / "slurm" / f"requeued-{job}.txt"
