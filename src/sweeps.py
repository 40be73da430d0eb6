"""What a run and a sweep job need from Hydra: one result per job, failures contained, a summary at the end.

Each run writes `result.json` into its directory, with its run name (the overrides a sweep varies).
A failing job records its one-line reason and returns None, so the sweep carries on (Hydra's
sweepers would otherwise stop at the first exception). When the multirun ends, SweepSummary (a
Hydra callback) hands the jobs' results to src/sweep_analysis.py (a table of every job, the seeds'
mean and spread, a power law fitted to loss against model size: `summary.md` in the sweep
directory) and to src/plots.py (`summary.png`).

Under `hydra/launcher=parallel` jobs run concurrently in worker processes (src/sweep_launcher.py):
each job takes its share of the CPU cores, or its own GPU (configure_job_resources).

A sweep stops as a run does: SIGINT or SIGTERM to its main process stops the jobs in flight between
two steps (each saves its last.ckpt), starts no other, summarises the jobs it launched and says so
in one line (exit 130 or 143); rerunning the same command resumes the stopped jobs. A worker whose
main process is gone (`kill -9`) saves and stops; a worker killed itself fails its job alone.
"""

from __future__ import annotations

import copy
import fcntl
import functools
import json
import logging
import math
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from src import rules

log = logging.getLogger(__name__)
RESULT = "result.json"
# Overrides that say where or how a job runs, not what it trains: never part of a run name, nor of
# what makes two jobs the same job (a sweep job resumed with `python -m src.train ckpt_path=<job>`).
NOT_HYPERPARAMETERS = ("paths.", "hydra.", "ckpt_path", "overwrite", "progress_bar", "sample.", "sweep.")
SIGNALS = (signal.SIGINT, signal.SIGTERM)
# What a sweep job skips unless `sweep.media=true` or the command line sets these keys itself:
# media cost more than a small job's training, and a sweep is read from its summary.
MEDIA_OFF = {
    "callbacks.sample_text": None,
    "callbacks.attention_maps": None,
    "sample.max_new_tokens": 0,
    "explorer": False,
}


def in_multirun() -> bool:
    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


def job_overrides() -> list[str]:
    return list(HydraConfig.get().overrides.task) if HydraConfig.initialized() else []


def swept_keys(hydra_cfg: DictConfig) -> set[str]:
    """The keys this sweep varies: sweep syntax on the command line, or the sweeper's search space."""
    params = hydra_cfg.sweeper.get("params")
    keys = set(params.keys()) if params else set()
    sweep_file = Path(hydra_cfg.sweep.dir) / "multirun.yaml"
    if sweep_file.is_file():
        keys |= swept_on_command_line(str(sweep_file), sweep_file.stat().st_mtime_ns)
    return keys


@functools.cache
def swept_on_command_line(sweep_file: str, modified_ns: int) -> frozenset[str]:
    """The keys given sweep syntax in multirun.yaml's command line. Read once per sweep: a job
    asks three times (its run name, result.json twice), and a 12-job sweep spent 1.5 s parsing it."""
    original = OmegaConf.load(sweep_file).hydra.overrides.task
    overrides = OverridesParser.create().parse_overrides(list(original))
    return frozenset(o.get_key_element() for o in overrides if o.is_sweep_override())


def varied_keys() -> list[str]:
    """The keys that set this run apart, as typed (`model.num_heads`): a sweep's swept keys, or the
    keys a single run's command line set; never where or how it runs (NOT_HYPERPARAMETERS)."""
    if not HydraConfig.initialized():
        return []
    if in_multirun():
        keys = set(swept_keys(HydraConfig.get()))
    else:
        keys = {o.lstrip("+~").split("=", 1)[0] for o in job_overrides()}
    return sorted(k for k in keys if not k.startswith(NOT_HYPERPARAMETERS))


def run_name() -> str:
    """What distinguishes this job in TensorBoard: `num_heads=4,embedding_dim=128`."""
    if not in_multirun():
        return ""
    return name_of(job_overrides(), swept_keys(HydraConfig.get()))


def name_of(overrides: Sequence[str], swept: set[str] | frozenset[str]) -> str:
    """A job's run name from its overrides: the swept ones (or all that set hyperparameters), short keys."""
    overrides = [o for o in overrides if not o.startswith(NOT_HYPERPARAMETERS)]
    chosen = [o for o in overrides if o.split("=", 1)[0] in swept] or overrides
    return ",".join(o.split("=", 1)[0].rsplit(".", 1)[-1] + "=" + o.split("=", 1)[1] for o in chosen)


def same_job(recorded: Sequence[str] | None, overrides: Sequence[str]) -> bool:
    """Whether a job directory's record is this job's: the same hyperparameters, wherever and however it
    ran (a record without overrides predates them: taken as this job's)."""

    def hyperparameters(given: Sequence[str]) -> list[str]:
        return sorted(o for o in given if not o.lstrip("+~").startswith(NOT_HYPERPARAMETERS))

    return recorded is None or hyperparameters(recorded) == hyperparameters(overrides)


def resumable(record: dict[str, Any]) -> bool:
    """A record of a job that stopped before its end and may go on from its last.ckpt: still running
    when its process died, stopped by a signal, or failed because its worker was killed."""
    return record.get("status") in ("running", "interrupted") or bool(record.get("resumable"))


def write_result(output_dir: str | Path, result: dict[str, Any]) -> None:
    """This job's record, with its overrides and run name."""
    write_record(Path(output_dir), {"overrides": job_overrides(), "run_name": run_name(), **result})


def write_record(job_dir: Path, record: dict[str, Any]) -> None:
    """Atomically: the other ranks of a SLURM job read it while rank 0 writes it (run_job)."""
    path = job_dir / RESULT
    partial = path.with_name(f".{RESULT}.{os.getpid()}")
    partial.write_text(json.dumps(record, indent=2, default=float))
    os.replace(partial, path)


def read_result(job_dir: Path) -> dict[str, Any] | None:
    try:
        return json.loads((job_dir / RESULT).read_text())
    except (OSError, ValueError):
        return None


def cpu_cores() -> int:
    """The cores this process may run on (its affinity, not the whole machine's count)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def gpu_count() -> int:
    import torch  # only when a job starts: the sweep summary never needs it

    return torch.cuda.device_count()


def check_sweep_config(cfg: DictConfig) -> None:
    """The `sweep` keys' values, checked before a sweep starts; raises ConfigError naming the fix."""
    rules.sweep(cfg.sweep.jobs_per_gpu, cfg.sweep.media)


def launcher_of(point: list[str]) -> str:
    """The hydra/launcher option a multirun's command line chooses: basic (Hydra's default), parallel, slurm."""
    chosen = [o.split("=", 1)[1] for o in point if o.lstrip("+~").startswith("hydra/launcher=")]
    return chosen[-1] if chosen else "basic"


def is_ddp(trainer: DictConfig) -> bool:
    return str(trainer.strategy).startswith("ddp")


def check_launcher(cfg: DictConfig, launcher: str) -> None:
    """What a launcher can run of a job's trainer; raises ValueError saying what works."""
    if launcher == "parallel" and is_ddp(cfg.trainer):
        raise ValueError(
            f"hydra/launcher=parallel runs sweep jobs side by side, but trainer.strategy={cfg.trainer.strategy} "
            f"makes each job a process per device: drop hydra/launcher=parallel (DDP jobs then run one after "
            f"another), or sweep single-device jobs (trainer=cpu or trainer=gpu)"
        )
    if launcher == "slurm":
        for key, asks in (("devices", "tasks and GPUs per node"), ("num_nodes", "nodes")):
            value = cfg.trainer[key]
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(
                    f"hydra/launcher=slurm asks SLURM for trainer.{key} {asks}, so it must be a positive "
                    f"integer, got {value!r}: e.g. trainer=ddp trainer.devices=4 trainer.num_nodes=1"
                )


def check_sweep_job(cfg: DictConfig, point: list[str]) -> None:
    """One point of a multirun before the sweep starts: its sweep keys and what its launcher can run."""
    check_sweep_config(cfg)
    check_launcher(cfg, launcher_of(point))
    typed = [o for o in point if o.startswith("hydra.launcher.n_jobs=")]
    if typed and launcher_of(point) == "parallel":  # Hydra's keys are not in cfg: read as typed
        rules.launcher_jobs(OverridesParser.create().parse_overrides(typed[-1:])[0].value())


def parallel_jobs(accelerator: str, jobs_per_gpu: int) -> int:
    """hydra/launcher=parallel's default n_jobs: every GPU `jobs_per_gpu` times, else every core."""
    rules.positive_int("sweep.jobs_per_gpu", jobs_per_gpu, "e.g. sweep.jobs_per_gpu=2")
    gpus = gpu_count() if accelerator in ("auto", "gpu", "cuda") else 0
    return gpus * jobs_per_gpu if gpus else cpu_cores()


OmegaConf.register_new_resolver("parallel_jobs", parallel_jobs, replace=True)


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

    Each of them composes the run directory on its own: they agree on one only through an id all
    share, torchrun's --rdzv-id (TORCHELASTIC_RUN_ID) or SLURM's job and step.
    """
    if "TORCHELASTIC_RUN_ID" in os.environ and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        return "torchrun", os.environ["TORCHELASTIC_RUN_ID"]
    if "SLURM_JOB_ID" in os.environ and int(os.environ.get("SLURM_NTASKS", "1")) > 1:
        return "slurm", f"{os.environ['SLURM_JOB_ID']}.{os.environ.get('SLURM_STEP_ID', '0')}"
    return None


def run_folder(timestamped: str) -> str:
    """hydra.run.dir below paths.log_dir: torchrun/<rdzv id> or slurm/<job>.<step> for a run of
    several launched processes, so every rank finds the same one, else <date>/<time>."""
    launched = launched_run()
    return f"{launched[0]}/{launched[1]}" if launched is not None and launched[1] != "none" else timestamped


def check_launched_run(run_dir_typed: bool) -> None:
    """torchrun without --rdzv-id names every run 'none': its ranks could not find one run directory."""
    launched = launched_run()
    if launched is not None and launched[1] == "none" and not run_dir_typed:
        raise ValueError(
            "torchrun started this run without --rdzv-id, so its ranks cannot agree on one run directory: "
            "give every torchrun the same --rdzv-id=<name> (the run goes to outputs/torchrun/<name>), "
            "or the same hydra.run.dir=<folder>"
        )


OmegaConf.register_new_resolver("run_folder", run_folder, replace=True)
# Only rank 0 writes the run's .hydra/ and train.log; rank k logs to train_rank_k.log.
OmegaConf.register_new_resolver("rank_zero", lambda value: value if launched_rank() == 0 else None, replace=True)
OmegaConf.register_new_resolver(
    "rank_log", lambda name: name if launched_rank() == 0 else f"{name}_rank_{launched_rank()}", replace=True
)


def sweep_size(hydra_cfg: DictConfig) -> int | None:
    """How many jobs the sweeper hands the launcher at once: the grid's size, or Optuna's batch."""
    if "n_jobs" in hydra_cfg.sweeper:  # Optuna: trials are launched n_jobs at a time
        return int(hydra_cfg.sweeper.n_jobs)
    sweep_file = Path(hydra_cfg.sweep.dir) / "multirun.yaml"
    if not sweep_file.is_file():
        return None
    typed = list(OmegaConf.load(sweep_file).hydra.overrides.task)
    params = hydra_cfg.sweeper.get("params") or {}
    choices: dict[str, int] = {}
    for override in OverridesParser.create().parse_overrides([*(f"{k}={v}" for k, v in params.items()), *typed]):
        count = len(list(override.sweep_string_iterator())) if override.is_discrete_sweep() else 1
        choices[override.get_key_element()] = count  # the last one of a key wins, as in Hydra
    return math.prod(choices.values())


def concurrent_jobs(hydra_cfg: DictConfig) -> int:
    """Jobs of this sweep that run at the same time: 1 unless the launcher is hydra/launcher=parallel."""
    launcher = hydra_cfg.launcher
    if not str(launcher.get("_target_", "")).endswith(("JoblibLauncher", "ParallelLauncher")):
        return 1
    return worker_count(int(launcher.n_jobs), sweep_size(hydra_cfg))


def worker_count(n_jobs: int, jobs: int | None) -> int:
    """Jobs at once for joblib's n_jobs (-1: every core, -2: all but one, ...), at most the sweep's jobs."""
    if n_jobs < 0:
        n_jobs = cpu_cores() + 1 + n_jobs
    return max(1, min(n_jobs, jobs) if jobs else n_jobs)


@dataclass
class JobResources:
    """What one concurrent job may use: torch threads, and a GPU index (None: leave devices as set).

    `slot` is the open lock file that holds the job's GPU slot; closing it frees the slot."""

    threads: int
    gpu: int | None
    slot: int | None = None

    def release(self) -> None:
        if self.slot is not None:
            os.close(self.slot)  # the kernel drops the lock with the descriptor, also on kill -9
            self.slot = None


def plan_resources(concurrent: int, cores: int, gpus: int, accelerator: str, devices: Any) -> tuple[int, bool]:
    """Divide the cores among the jobs that run at once; whether each job takes one GPU of its own.

    A job asking for several devices (DDP) keeps its own setting.
    """
    threads = max(1, cores // max(1, concurrent))
    on_gpu = gpus > 0 and accelerator in ("auto", "gpu", "cuda") and devices in (1, "1", "auto") and concurrent > 1
    return threads, on_gpu


def take_gpu_slot(sweep_dir: Path, gpus: int, jobs_per_gpu: int, wait: float = 1.0) -> tuple[int, int]:
    """A free GPU slot for this job: (GPU index, the locked descriptor that holds it until the job ends).

    Slots are lock files in the sweep directory, `jobs_per_gpu` per GPU, tried every GPU's first
    slot before any second one, so jobs spread evenly. joblib hands the next job to whichever worker
    is free, and jobs end at uneven times: a job number says nothing about which GPU is free, a lock
    does. If every slot is taken (n_jobs set above GPUs x sweep.jobs_per_gpu), wait for one.
    """
    folder = sweep_dir / ".gpu-slots"
    folder.mkdir(parents=True, exist_ok=True)
    while True:
        for k in range(jobs_per_gpu):
            for gpu in range(gpus):
                fd = os.open(folder / f"gpu{gpu}-slot{k}", os.O_RDWR | os.O_CREAT, 0o644)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    return gpu, fd
                except BlockingIOError:
                    os.close(fd)
        time.sleep(wait)


def configure_job_resources(cfg: DictConfig) -> JobResources | None:
    """Called as a sweep job starts: its share of the machine, before torch does any work.

    Sets torch's intra- and inter-op thread counts to cores // concurrent jobs, and pins the job
    to a free GPU slot (trainer.devices=[i]) when jobs run concurrently on a GPU machine; the caller
    releases it when the job ends. A sequential sweep (Hydra's basic launcher) and a single run are
    left as they are.
    """
    if not in_multirun():
        return None
    hydra_cfg = HydraConfig.get()
    concurrent = concurrent_jobs(hydra_cfg)
    if concurrent == 1:
        return None
    import torch

    gpus = gpu_count()
    threads, on_gpu = plan_resources(concurrent, cpu_cores(), gpus, cfg.trainer.accelerator, cfg.trainer.devices)
    plan = JobResources(threads, None)
    if on_gpu:
        sweep_dir = Path(hydra_cfg.runtime.output_dir).parent  # the job's directory is <sweep dir>/<n>
        plan.gpu, plan.slot = take_gpu_slot(sweep_dir, gpus, cfg.sweep.jobs_per_gpu)
    torch.set_num_threads(plan.threads)
    if torch.get_num_interop_threads() != plan.threads:
        try:
            torch.set_num_interop_threads(plan.threads)
        except RuntimeError:  # a reused worker process: inter-op threads are fixed once started
            pass
    if plan.gpu is not None:
        with open_dict(cfg):
            cfg.trainer.devices = [plan.gpu]
    log.info(
        f"job {hydra_cfg.job.num}: 1 of {concurrent} concurrent jobs, {plan.threads} threads"
        + (f", GPU {plan.gpu}" if plan.gpu is not None else "")
    )
    return plan


def media_off(cfg: DictConfig) -> dict[str, Any]:
    """The media keys a sweep job switches off: all of MEDIA_OFF but those the command line sets itself."""
    if not in_multirun() or cfg.get("sweep", {}).get("media", False):
        return {}
    typed = {o.lstrip("+~").split("=", 1)[0] for o in job_overrides()}
    return {k: v for k, v in MEDIA_OFF.items() if not any(t == k or t.startswith(k + ".") for t in typed)}


def sweep_defaults(cfg: DictConfig) -> DictConfig:
    """A sweep job's config: without the TensorBoard text sample, attention maps and final sample.

    Unless `sweep.media=true`; a key the command line sets itself (e.g. `sample.max_new_tokens=300`
    or `callbacks.attention_maps.prompt=...`) keeps its configured value.
    """
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
    _hydra_subprocess_cmd; tests/test_scaling.py checks it against the installed Lightning). In a
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
class ThisSweep:
    """The multirun this process runs as its main process: its config, the jobs it launched (number ->
    overrides), those that returned no loss here (failed, or refused), and the signal that stopped it."""

    config: DictConfig | None = None
    launched: dict[int, list[str]] = field(default_factory=dict)
    returned_none: set[int] = field(default_factory=set)
    stopped: str | None = None


@dataclass
class WorkerState:
    """A parallel sweep's worker: whether a job runs in it, and a stop asked of it between jobs."""

    in_job: bool = False
    stop: str | None = None


SWEEP = ThisSweep()
WORKER = WorkerState()


class SweepStopped(BaseException):
    """SIGINT or SIGTERM to a parallel sweep's worker while its job is not training (loading, planning,
    the step-0 validation): the job stops where it is, with nothing unsaved. A BaseException, so that
    no library's `except Exception` keeps it from run_job."""


def stop_job(signum: int, frame: Any) -> None:
    """A worker's handler outside training (GracefulInterrupt's takes over while a job trains)."""
    name = signal.Signals(signum).name
    WORKER.stop = WORKER.stop or name
    if WORKER.in_job:
        raise SweepStopped(name)


def stop_sweep(signum: int, frame: Any) -> None:
    """The main process's handler outside a job's training (between jobs, while one loads): nothing is
    unsaved, so the sweep stops now, with its summary. A second signal while it is written stops at once."""
    name = signal.Signals(signum).name
    if SWEEP.stopped is not None:
        print(f"error: second {name} while the sweep stopped: stopped at once", file=sys.stderr)
        os._exit(128 + signum)
    assert SWEEP.config is not None
    finish(SWEEP.config, name)


def exit_status(signal_name: str) -> int:
    """130 after SIGINT, 143 after SIGTERM: how a run or a sweep stopped by a signal exits."""
    return 128 + (signal.SIGINT if signal_name.endswith("SIGINT") else signal.SIGTERM)


def run_job(cfg: DictConfig, train: Callable[[DictConfig], float]) -> float | None:
    """One sweep job: skip it if it already finished, resume it if it was stopped, contain its failure.

    A job is known by its overrides (same_job), not its number: a directory holding another job's
    run is kept and this job refused. Under hydra/launcher=slurm every task of a DDP job runs this;
    only rank 0 writes result.json, with its decision, and each other rank decides alike: from the
    record rank 0 started from, or, if rank 0 has already written this attempt's record, from rank
    0's decision in it.
    """
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
    """A signal (or the end of the main process) stopped this job: say so in its log, record it (rank
    0) for a rerun to resume, then end the sweep here (basic launcher) or hand back to the main process."""
    from src.training.callbacks import PARENT_GONE

    log.info(f"job {HydraConfig.get().job.num} ({run_name()}): {message}")  # the console and the job's train.log
    if record and (read_result(output_dir) or {}).get("status") != "ok":  # not if it had just finished
        write_result(output_dir, {"status": "interrupted", "reason": message})
    if signal_name == PARENT_GONE:  # nobody is left to take this worker's result: it ends here
        logging.shutdown()
        os._exit(1)
    if SWEEP.config is not None:  # this is the sweep's main process (basic launcher): it stops here
        finish(SWEEP.config, signal_name)


def other_jobs(config: DictConfig) -> list[tuple[int, str, str]]:
    """The jobs of a grid (Hydra's basic sweeper) whose directory holds another job: (number, its run
    name, this job's), unless overwrite=true. Found before the sweep starts; run_job refuses such a job
    of any other sweeper (Optuna's trials are drawn as it goes) when its turn comes."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

    if not str(config.hydra.sweeper.get("_target_", "")).endswith("BasicSweeper"):
        return []
    params = config.hydra.sweeper.get("params") or {}
    typed = [*(f"{k}={v}" for k, v in params.items()), *config.hydra.overrides.task]
    parsed = OverridesParser.create().parse_overrides(typed)
    swept = {o.get_key_element() for o in parsed if o.is_sweep_override()}
    batches = BasicSweeper.split_arguments(parsed, None)
    other = []
    for number, overrides in enumerate(job for batch in batches for job in batch):
        record = read_result(Path(config.hydra.sweep.dir) / str(number))
        overwrite = any(o.lower() in ("overwrite=true", "+overwrite=true") for o in overrides)
        if record is not None and not overwrite and not same_job(record.get("overrides"), overrides):
            theirs = record.get("run_name") or " ".join(record.get("overrides", []))
            other.append((number, theirs, name_of(overrides, swept)))
    return other


def sweep_rows(config: DictConfig) -> list[dict[str, Any]]:
    """summary.md's rows: the jobs this process launched, each as its directory records it (a job
    refused, or a directory holding another sweep's job, says so); every job directory when the jobs
    were launched elsewhere (hydra/launcher=slurm)."""
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
        from src.sweep_analysis import summary_text  # the analysis only once the sweep is done

        table, fit, residuals = summary_text(rows)
        (sweep_dir / "summary.md").write_text(f"# Sweep {sweep_dir}\n\n{table}\n")
        from src.plots import save_png, sweep_figure  # matplotlib too

        figure = sweep_figure(rows, sorted(swept_keys(config.hydra)), fit, residuals)
        save_png(figure, str(sweep_dir / "summary.png"))
        from src.training.tensorboard import watch_command  # every job's curves, named by what it swept

        print(f"\n{table}\n\nsummary: {sweep_dir / 'summary.md'}, plot: {sweep_dir / 'summary.png'}")
        print(f"watch it: {watch_command(sweep_dir)}")
    if stopped is not None:
        print(f"error: {stop_line(stopped, rows, total or sweep_size(config.hydra) or len(rows))}", file=sys.stderr)
        sys.exit(exit_status(stopped))
    failed = [r["job"] for r in rows if r.get("status") != "ok"]
    if failed:
        print(f"error: {len(failed)} of {len(rows)} jobs failed: {failed}", file=sys.stderr)
        sys.exit(1)


def stop_line(stopped: str, rows: list[dict[str, Any]], total: int) -> str:
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
    return f"{stopped} stopped the sweep: {'; '.join(parts)}; rerun the same command to resume it"


class SweepSummary(Callback):
    """A multirun's main process: stops on SIGINT or SIGTERM between jobs, and at the end writes the
    table of all jobs (printed and in summary.md) and a plot."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        other = other_jobs(config)
        if other:  # before Hydra writes anything into the sweep directory
            number, theirs, ours = other[0]
            print(
                f"error: hydra.sweep.dir={config.hydra.sweep.dir} holds another sweep: its job {number} is "
                f"{theirs}, this sweep's job {number} is {ours} ({len(other)} such jobs): choose a new "
                f"hydra.sweep.dir, or overwrite=true to replace them",
                file=sys.stderr,
            )
            sys.exit(2)
        SWEEP.config = config
        for s in SIGNALS:
            signal.signal(s, stop_sweep)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        finish(config)
