"""A sweep job: skipped if it finished, resumed if it was stopped, its media off, and its failure
recorded in one line and returned as None, so the sweep carries on (Hydra's sweepers would stop at
the first exception). Loaded only by a multirun's jobs (src/train.py) and the parallel launcher."""

from __future__ import annotations

import copy
import json
import logging
import os
import signal
import sys
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from src import rules
from src.run.points import run_name, write_result
from src.run.record import in_multirun, job_overrides, read_result, resumable, same_job
from src.run.rundir import launched_rank, launched_run
from src.sweeps.resources import configure_job_resources
from src.sweeps.summary import SWEEP, finish

log = logging.getLogger(__name__)
# What a sweep job skips unless `sweep.media=true` or the command line sets these keys itself:
# media cost more than a small job's training, and a sweep is read from its summary.
MEDIA_OFF = {
    "callbacks.sample_text": None,
    "callbacks.attention_maps": None,
    "sample.max_new_tokens": 0,
    "explorer": False,
}


def media_off(cfg: DictConfig) -> dict[str, Any]:
    """MEDIA_OFF less the keys the command line sets itself (e.g. `sample.max_new_tokens=300`)."""
    if not in_multirun() or cfg.get("sweep", {}).get("media", False):
        return {}
    typed = {o.lstrip("+~").split("=", 1)[0] for o in job_overrides()}
    return {k: v for k, v in MEDIA_OFF.items() if not any(t == k or t.startswith(k + ".") for t in typed)}


def sweep_defaults(cfg: DictConfig) -> DictConfig:
    """A sweep job's config, with media_off's keys set."""
    off = media_off(cfg)
    if not off:
        return cfg
    cfg = copy.deepcopy(cfg)
    with open_dict(cfg):
        for key, value in off.items():
            OmegaConf.update(cfg, key, value, merge=False)
    return cfg


def rank_overrides(cfg: DictConfig) -> list[str]:
    """A DDP job's command line for its other ranks: the job's own overrides, the media it switched
    off and the checkpoint it resumes, so every rank builds the job's config and nothing else."""
    typed = job_overrides()
    extra = [f"{k}={json.dumps(v)}" for k, v in media_off(cfg).items()]  # null, false, 0 as typed
    if cfg.ckpt_path is not None and not any(o.startswith("ckpt_path=") for o in typed):
        extra.append(f"ckpt_path={cfg.ckpt_path}")
    return [*typed, *extra]


@contextmanager
def ranks_start_as_this_job(cfg: DictConfig) -> Iterator[None]:
    """Lightning starts a DDP job's other ranks itself, as `python -m src.train` + sys.argv[1:] +
    `hydra.run.dir=<HydraConfig run.dir>` (lightning/fabric/strategies/launchers/subprocess_script.py,
    _hydra_subprocess_cmd; tests/run/test_scaling.py checks it against the installed Lightning). In a
    multirun that argv is the sweep's, so each rank would start a sweep of its own, and run.dir is not
    the job's directory: for the job's duration they are the job's own overrides and directory.
    After the job its process group and the variables Lightning set (MASTER_PORT, ...) are gone,
    so the next job of a sequential sweep starts its own group with its own ranks."""
    import torch.distributed

    hydra_cfg = HydraConfig.get()
    argv, run_dir, environment = sys.argv[:], hydra_cfg.run.dir, dict(os.environ)
    sys.argv[1:] = rank_overrides(cfg)
    with read_write(hydra_cfg):
        hydra_cfg.run.dir = hydra_cfg.runtime.output_dir
    try:
        yield
    finally:
        sys.argv[:] = argv
        with read_write(hydra_cfg):
            hydra_cfg.run.dir = run_dir
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
        os.environ.clear()
        os.environ.update(environment)


@dataclass
class WorkerState:
    """A parallel sweep's worker: whether a job runs in it, and a stop asked of it between jobs."""

    in_job: bool = False
    stop: str | None = None


WORKER = WorkerState()


class SweepStopped(BaseException):
    """A signal to a worker whose job is not training: nothing is unsaved. A BaseException, so that no
    library's `except Exception` keeps it from run_job."""


def stop_job(signum: int, frame: Any) -> None:
    """A worker's handler outside training (GracefulInterrupt's takes over while a job trains)."""
    name = signal.Signals(signum).name
    WORKER.stop = WORKER.stop or name
    if WORKER.in_job:
        raise SweepStopped(name)


def run_job(cfg: DictConfig, train: Callable[[DictConfig], float]) -> float | None:
    """One sweep job, known by its overrides (same_job), not its number: a directory holding another
    job's run is kept and this job refused. Under hydra/launcher=slurm every task of a DDP job runs
    this; only rank 0 writes result.json, and the other ranks follow the decision recorded in it."""
    from src.training.callbacks import TrainingInterrupted  # Lightning: only once a job runs

    output_dir = Path(HydraConfig.get().runtime.output_dir)
    number = HydraConfig.get().job.num
    if WORKER.stop is not None:  # a parallel sweep's worker, stopped before this job began: not started
        raise SweepStopped(WORKER.stop)
    SWEEP.launched.setdefault(number, job_overrides())
    rank_zero, attempt = launched_rank() == 0, "/".join(launched_run() or ()) or None
    done = read_result(output_dir)
    if not rank_zero and attempt is not None and done is not None and done.get("attempt") == attempt:
        resume = done.get("resumed_from")
    else:
        if done is not None and not same_job(done.get("overrides"), job_overrides()) and not cfg.overwrite:
            SWEEP.returned_none.add(number)
            print(
                f"error: job {number} ({run_name()}): {output_dir} holds another job "
                f"({' '.join(done['overrides'])}): kept; choose a new hydra.sweep.dir, or overwrite=true to replace it",
                file=sys.stderr,
            )
            return None
        if done is not None and not cfg.overwrite and done.get("status") == "ok":
            log.info(
                f"{output_dir} already finished (best val loss {done['best_val_loss']:.4f}): kept; "
                f"overwrite=true reruns it"
            )
            return done["best_val_loss"]
        last = output_dir / "checkpoints" / "last.ckpt"
        stopped = done is not None and not cfg.overwrite and resumable(done)
        resume = str(last) if stopped and last.is_file() and cfg.ckpt_path is None else None
    if resume is not None:
        log.info(f"{output_dir} was interrupted: resuming it from {resume}")
        cfg = copy.deepcopy(cfg)
        with open_dict(cfg):
            cfg.ckpt_path = resume
    if rank_zero:  # what a rerun finds if this job is interrupted
        write_result(output_dir, {"status": "running", "attempt": attempt, "resumed_from": resume})
    resources = None
    WORKER.in_job = True
    try:
        if WORKER.stop is not None:  # asked just before in_job said so
            raise SweepStopped(WORKER.stop)
        resources = configure_job_resources(cfg)
        with ranks_start_as_this_job(cfg):
            return train(sweep_defaults(cfg))
    except (TrainingInterrupted, SweepStopped) as stop:
        name = stop.signal_name if isinstance(stop, TrainingInterrupted) else str(stop)
        message = str(stop) if isinstance(stop, TrainingInterrupted) else f"{name} before training: nothing to save"
        WORKER.in_job = False
        job_stopped(output_dir, name, message, rank_zero)
        return None
    except Exception as err:  # any failure stays inside this job; the sweep goes on
        SWEEP.returned_none.add(number)
        reason = " ".join(str(err).split()) or type(err).__name__
        if not isinstance(err, (ValueError, OSError)):  # not bad input: keep the trace for debugging
            log.error("".join(traceback.format_exception(err)))
            reason = f"{type(err).__name__}: {reason}"
        print(f"error: job {number} ({run_name()}): {reason}", file=sys.stderr)
        if rank_zero and not isinstance(err, rules.RunDirInUse):  # that directory's record is the live run's
            write_result(output_dir, {"status": "failed", "reason": reason})
        return None
    finally:
        WORKER.in_job = False
        if resources is not None:
            resources.release()  # the next job may take this GPU


def job_stopped(output_dir: Path, signal_name: str, message: str, record: bool) -> None:
    """Record a stopped job for a rerun to resume, then end the sweep (basic launcher) or the worker."""
    from src.training.callbacks import PARENT_GONE

    log.info(f"job {HydraConfig.get().job.num} ({run_name()}): {message}")  # the console and the job's train.log
    if record and (read_result(output_dir) or {}).get("status") != "ok":  # not if it had just finished
        write_result(output_dir, {"status": "interrupted", "reason": message})
    if signal_name == PARENT_GONE:  # nobody is left to take this worker's result: it ends here
        logging.shutdown()
        os._exit(1)
    if SWEEP.config is not None:  # this is the sweep's main process (basic launcher): it stops here
        finish(SWEEP.config, signal_name)
