"""A multirun's main process: a grid that would overwrite another sweep's jobs is refused before it
starts, SIGINT or SIGTERM between jobs stops it, and at its end the jobs' results are summarised
(summary.md by analysis.py, summary.png by figure.py)."""

from __future__ import annotations

import atexit
import logging
import os
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig

from src.rules import RunDirInUse
from src.run.points import name_of, sweep_points, swept_keys
from src.run.record import read_result, same_job
from src.run.rundir import LOCK, lock_run_dir
from src.sweeps.resources import sweep_size
from src.training import STOP_SIGNALS, exit_status


@dataclass
class ThisSweep:
    """The multirun this process runs as its main process."""

    config: DictConfig | None = None
    launched: dict[int, list[str]] = field(default_factory=dict)  # job number -> overrides
    returned_none: set[int] = field(default_factory=set)  # failed, or refused
    stopped: str | None = None
    lock: int | None = None  # the sweep directory's lock, held while this process lives


SWEEP = ThisSweep()


def stop_sweep(signum: int, frame: Any) -> None:
    """The main process's handler between jobs: nothing is unsaved, so the sweep stops now, with its
    summary. A second signal while it is written stops at once."""
    name = signal.Signals(signum).name
    if SWEEP.stopped is not None:
        print(f"error: second {name} while the sweep stopped: stopped at once", file=sys.stderr)
        os._exit(128 + signum)
    assert SWEEP.config is not None
    try:
        finish(SWEEP.config, name)
    except SystemExit as stop:  # ended here, not raised: a handler's exception can be swallowed where the
        sys.stdout.flush()  # signal lands (in a finalizer: "Exception ignored in ... __del__"), and the
        sys.stderr.flush()  # sweep would go on to launch its next job
        logging.shutdown()
        os._exit(stop.code if isinstance(stop.code, int) else 1)


def hold_sweep_dir(sweep_dir: Path) -> None:
    """Lock the sweep directory for this process's life (the kernel drops the lock, also on kill -9): a
    second sweep into it would read a live job's record as "interrupted" and resume it."""
    made = [d for d in (sweep_dir.absolute(), *sweep_dir.absolute().parents) if not d.exists()]  # deepest first
    try:
        SWEEP.lock = lock_run_dir(sweep_dir)
    except RunDirInUse:
        print(
            f"error: another sweep is running in hydra.sweep.dir={sweep_dir}: wait for it to end (rerunning "
            f"the same command then resumes what it left), or choose another hydra.sweep.dir",
            file=sys.stderr,
        )
        sys.exit(2)
    atexit.register(drop_if_unwritten, made, os.getpid())


def drop_if_unwritten(made: list[Path], pid: int) -> None:
    """At exit, the folders made for the sweep if it wrote nothing but its lock: Hydra sets up the launcher
    and sweeper after the lock is taken, and their refusals (no sinfo, a storage that cannot be opened)
    should leave nothing behind."""
    if os.getpid() != pid or not made or not made[0].is_dir() or [p.name for p in made[0].iterdir()] != [LOCK]:
        return
    (made[0] / LOCK).unlink()
    for folder in made:
        try:
            folder.rmdir()
        except OSError:  # written meanwhile
            return


def other_jobs(config: DictConfig) -> list[tuple[int, str, str]]:
    """(number, its run name, this job's) of each job of a grid whose directory holds another job, unless
    overwrite=true. Other sweepers' jobs (Optuna's) are refused by run_job when their turn comes."""
    if not str(config.hydra.sweeper.get("_target_", "")).endswith("BasicSweeper"):
        return []
    params = config.hydra.sweeper.get("params") or {}
    typed = [*(f"{k}={v}" for k, v in params.items()), *config.hydra.overrides.task]
    parsed = OverridesParser.create().parse_overrides(typed)
    swept = {o.get_key_element() for o in parsed if o.is_sweep_override()}
    other = []
    for number, overrides in enumerate(sweep_points(typed)):  # the grid, in the basic sweeper's order
        record = read_result(Path(config.hydra.sweep.dir) / str(number))
        overwrite = any(o.lower() in ("overwrite=true", "+overwrite=true") for o in overrides)
        if record is not None and not overwrite and not same_job(record.get("overrides"), overrides):
            theirs = record.get("run_name") or " ".join(record.get("overrides", []))
            other.append((number, theirs, name_of(overrides, swept)))
    return other


def sweep_rows(config: DictConfig) -> list[dict[str, Any]]:
    """summary.md's rows: the jobs this process launched, as their directories record them; every job
    directory when the jobs were launched elsewhere (hydra/launcher=slurm)."""
    sweep_dir = Path(config.hydra.sweep.dir)
    here = str(config.hydra.launcher.get("_target_", "")).endswith(("BasicLauncher", "ParallelLauncher"))
    if not SWEEP.launched:  # none yet (stopped before its first job), or run by another launcher
        jobs = [p for p in sweep_dir.glob("[0-9]*") if p.is_dir() and p.name.isdigit()] if not here else []
        return [
            {"job": int(p.name), **(read_result(p) or {"status": "missing"})}
            for p in sorted(jobs, key=lambda p: int(p.name))
        ]
    swept = swept_keys(config.hydra)
    rows = []
    for number, overrides in sorted(SWEEP.launched.items()):
        job_dir = sweep_dir / str(number)
        record = read_result(job_dir)
        row: dict[str, Any] = {"job": number, "overrides": overrides, "run_name": name_of(overrides, swept)}
        if record is None:
            row["status"] = "not started"
        elif not same_job(record.get("overrides"), overrides):
            other = record.get("run_name") or " ".join(record.get("overrides", []))
            row.update(status="failed", reason=f"{job_dir} holds another job ({other}): kept")
        elif record.get("status") == "running" and number in SWEEP.returned_none:
            row.update(record, status="failed", reason="refused: another training is running in its directory")
        else:
            row.update(record, run_name=record.get("run_name") or row["run_name"])
            if row["status"] == "running":  # no job of this sweep runs now: it was stopped before it said so
                row["status"] = "interrupted"
        rows.append(row)
    return rows


def finish(config: DictConfig, stopped: str | None = None, total: int | None = None) -> None:
    """The sweep's summary (printed, summary.md, summary.png) and how it ended: exit status 1 if a job
    failed; if a signal stopped it, one line saying what was done and how to resume, exit 130 or 143."""
    SWEEP.stopped = stopped
    sweep_dir = Path(config.hydra.sweep.dir)
    rows = sweep_rows(config)
    if rows:
        from src.sweeps.analysis import summary_text  # the analysis only once the sweep is done

        table, fit, residuals = summary_text(rows)
        from src.sweeps.isoflop import is_isoflop, isoflop_points, isoflop_text

        isoflop = None
        if is_isoflop(rows):  # budgets x sizes: the isoFLOP curves and exponents
            text, isoflop = isoflop_text(rows)
            table += f"\n\n{text}"
        swept = swept_keys(config.hydra)
        fixed = [o for o in config.hydra.overrides.task if o.split("=", 1)[0].lstrip("+~") not in swept]
        every = f"Every job: `{' '.join(fixed)}`\n\n" if fixed else ""
        # Named as Hydra names it (<date>/<time>), not by this machine's folders: the file is made to be shared
        (sweep_dir / "summary.md").write_text(f"# Sweep {sweep_dir.parent.name}/{sweep_dir.name}\n\n{every}{table}\n")
        from src.plots import save_png  # matplotlib too
        from src.sweeps.figure import isoflop_figure, sweep_figure

        figure = sweep_figure(rows, sorted(swept), fit, residuals)
        save_png(figure, str(sweep_dir / "summary.png"))
        if is_isoflop(rows):
            save_png(isoflop_figure(isoflop_points(rows), isoflop), str(sweep_dir / "isoflop.png"))
        from src.training.tensorboard import watch_command  # every job's curves, named by what it swept

        print(f"\n{table}\n\nsummary: {sweep_dir / 'summary.md'}, plot: {sweep_dir / 'summary.png'}")
        print(f"watch it: {watch_command(sweep_dir)}")
    if stopped is not None:
        line = stop_line(stopped, rows, total or sweep_size(config.hydra) or len(rows), resume_hint(config))
        print(f"error: {line}", file=sys.stderr)
        sys.exit(exit_status(stopped))
    failed = [r["job"] for r in rows if r.get("status") not in ("ok", "pruned")]  # pruned: Optuna stopped it
    if failed:
        print(f"error: {len(failed)} of {len(rows)} jobs failed: {failed}", file=sys.stderr)
        sys.exit(1)


def resume_hint(config: DictConfig) -> str:
    """What rerunning a stopped sweep does: a grid resumes its jobs; an Optuna search goes on with the trials
    its storage keeps, or, held in memory, starts over."""
    if not str(config.hydra.sweeper.get("_target_", "")).endswith("OptunaSweeper"):  # a grid
        return "rerun the same command to resume it"
    storage = config.hydra.sweeper.get("storage")
    if storage is None:
        return "its study was in memory: rerunning starts it over (hydra.sweeper.storage=<file or URL> keeps one)"
    return f"rerun the same command to go on to n_trials: the study in {storage} keeps its trials"


def stop_line(stopped: str, rows: list[dict[str, Any]], total: int, resume: str) -> str:
    """`SIGTERM stopped the sweep: 1 of 4 jobs finished; interrupted: 1, 2; 1 not started; rerun ...`."""
    interrupted = [r["job"] for r in rows if r.get("status") == "interrupted"]
    failed = [r["job"] for r in rows if r.get("status") not in ("ok", "interrupted", "not started")]
    finished = sum(r.get("status") == "ok" for r in rows)
    parts = [f"{finished} of {total} jobs finished"]
    parts += [
        f"{label}: {', '.join(map(str, jobs))}"
        for label, jobs in (("interrupted", interrupted), ("failed", failed))
        if jobs
    ]
    if total > finished + len(interrupted) + len(failed):
        parts.append(f"{total - finished - len(interrupted) - len(failed)} not started")
    return f"{stopped} stopped the sweep: {'; '.join(parts)}; {resume}"


def start(config: DictConfig) -> None:
    """As the multirun starts, before Hydra writes: refuse a sweep directory another sweep holds."""
    hold_sweep_dir(Path(config.hydra.sweep.dir))
    other = other_jobs(config)
    if other:
        number, theirs, ours = other[0]
        print(
            f"error: hydra.sweep.dir={config.hydra.sweep.dir} holds another sweep: its job {number} is "
            f"{theirs}, this sweep's job {number} is {ours} ({len(other)} such jobs): choose a new "
            f"hydra.sweep.dir, or overwrite=true to replace them",
            file=sys.stderr,
        )
        sys.exit(2)
    SWEEP.config = config
    from src.trackers import create_sweep_store  # here: a sweep without MLflow loads no logger

    create_sweep_store(config)
    for s in STOP_SIGNALS:
        signal.signal(s, stop_sweep)
