"""What a run and a sweep job need from Hydra: one result per job, failures contained, a summary at the end.

Each run writes `result.json` into its directory, with its run name (the overrides a sweep varies).
A failing job records its one-line reason and returns None, so the sweep carries on (Hydra's
sweepers would otherwise stop at the first exception). When the multirun ends, SweepSummary (a
Hydra callback) hands the jobs' results to src/sweep_analysis.py (a table of every job, the seeds'
mean and spread, a power law fitted to loss against model size: `summary.md` in the sweep
directory) and to src/plots.py (`summary.png`).

Under `hydra/launcher=parallel` (Hydra's joblib launcher) jobs run concurrently in worker
processes: each job takes its share of the CPU cores, or its own GPU (configure_job_resources).
"""

from __future__ import annotations

import copy
import fcntl
import functools
import json
import logging
import math
import os
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
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
# Overrides that say where or how a job runs, not what it trains: never part of a run name.
NOT_HYPERPARAMETERS = ("paths.", "hydra.", "ckpt_path", "overwrite", "progress_bar", "sample.", "sweep.")
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
    hydra_cfg = HydraConfig.get()
    overrides = [o for o in job_overrides() if not o.startswith(NOT_HYPERPARAMETERS)]
    swept = swept_keys(hydra_cfg)
    chosen = [o for o in overrides if o.split("=", 1)[0] in swept] or overrides
    return ",".join(o.split("=", 1)[0].rsplit(".", 1)[-1] + "=" + o.split("=", 1)[1] for o in chosen)


def write_result(output_dir: str | Path, result: dict[str, Any]) -> None:
    """Atomically: the other ranks of a SLURM job read it while rank 0 writes it (run_job)."""
    path = Path(output_dir) / RESULT
    record = {"overrides": job_overrides(), "run_name": run_name(), **result}
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
    """Jobs of this sweep that run at the same time: 1 unless the launcher is Hydra's joblib launcher."""
    launcher = hydra_cfg.launcher
    if not str(launcher.get("_target_", "")).endswith("JoblibLauncher"):
        return 1
    n_jobs = int(launcher.n_jobs)
    if n_jobs < 0:  # joblib's convention: -1 is every core, -2 all but one, ...
        n_jobs = cpu_cores() + 1 + n_jobs
    size = sweep_size(hydra_cfg)
    return max(1, min(n_jobs, size) if size else n_jobs)


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


REFUSED: list[int] = []  # jobs of this sweep whose directory held another job (basic launcher: this process)


def run_job(cfg: DictConfig, train: Callable[[DictConfig], float]) -> float | None:
    """One sweep job: skip it if it already finished, resume it if it was interrupted, contain its failure.

    Under hydra/launcher=slurm every task of a DDP job runs this; only rank 0 writes result.json,
    with its decision, and each other rank decides alike: from the record rank 0 started from, or,
    if rank 0 has already written this attempt's record, from rank 0's decision in it.
    """
    output_dir = Path(HydraConfig.get().runtime.output_dir)
    rank_zero, attempt = launched_rank() == 0, "/".join(launched_run() or ()) or None
    done = read_result(output_dir)
    if not rank_zero and attempt is not None and done is not None and done.get("attempt") == attempt:
        resume = done.get("resumed_from")
    else:
        if done is not None and done.get("overrides") not in (None, job_overrides()) and not cfg.overwrite:
            # A job is known by its overrides, not its number: another grid's job 0 is not this one.
            REFUSED.append(HydraConfig.get().job.num)
            print(
                f"error: job {HydraConfig.get().job.num} ({run_name()}): {output_dir} holds another job "
                f"({' '.join(done['overrides'])}): kept; choose a new hydra.sweep.dir, or overwrite=true to replace it",
                file=sys.stderr,
            )
            return None
        same_job = done is not None and done.get("overrides") == job_overrides() and not cfg.overwrite
        if same_job and done.get("status") == "ok":
            log.info(
                f"{output_dir} already finished (best val loss {done['best_val_loss']:.4f}): kept; "
                f"overwrite=true reruns it"
            )
            return done["best_val_loss"]
        last = output_dir / "checkpoints" / "last.ckpt"
        interrupted = same_job and done.get("status") == "running" and last.is_file() and cfg.ckpt_path is None
        resume = str(last) if interrupted else None
    if resume is not None:
        log.info(f"{output_dir} was interrupted: resuming it from {resume}")
        cfg = copy.deepcopy(cfg)
        with open_dict(cfg):
            cfg.ckpt_path = resume
    if rank_zero:  # what a rerun finds if this job is interrupted
        write_result(output_dir, {"status": "running", "attempt": attempt, "resumed_from": resume})
    resources = None
    try:
        resources = configure_job_resources(cfg)
        with ranks_start_as_this_job(cfg):
            return train(sweep_defaults(cfg))
    except Exception as err:  # any failure stays inside this job; the sweep goes on
        reason = " ".join(str(err).split()) or type(err).__name__
        if not isinstance(err, (ValueError, OSError)):  # not bad input: keep the trace for debugging
            log.error("".join(traceback.format_exception(err)))
            reason = f"{type(err).__name__}: {reason}"
        print(f"error: job {HydraConfig.get().job.num} ({run_name()}): {reason}", file=sys.stderr)
        if rank_zero:
            write_result(output_dir, {"status": "failed", "reason": reason})
        return None
    finally:
        if resources is not None:
            resources.release()  # the next job may take this GPU


class SweepSummary(Callback):
    """At the end of a multirun: the table of all jobs (printed and in summary.md) and a plot."""

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        jobs = sorted((p for p in sweep_dir.iterdir() if p.is_dir() and p.name.isdigit()), key=lambda p: int(p.name))
        rows = [{"job": int(p.name), **(read_result(p) or {"status": "missing"})} for p in jobs]
        if not rows:
            return
        from src.sweep_analysis import summary_text  # the analysis only once the sweep is done

        table, fit, residuals = summary_text(rows)
        (sweep_dir / "summary.md").write_text(f"# Sweep {sweep_dir}\n\n{table}\n")
        from src.plots import save_png, sweep_figure  # matplotlib too

        figure = sweep_figure(rows, sorted(swept_keys(config.hydra)), fit, residuals)
        save_png(figure, str(sweep_dir / "summary.png"))
        from src.training.tensorboard import watch_command  # every job's curves, named by what it swept

        print(f"\n{table}\n\nsummary: {sweep_dir / 'summary.md'}, plot: {sweep_dir / 'summary.png'}")
        print(f"watch it: {watch_command(sweep_dir)}")
        failed = sorted({*(r["job"] for r in rows if r.get("status") != "ok"), *REFUSED})
        if failed:
            print(f"error: {len(failed)} of {len(rows)} jobs failed: {failed}", file=sys.stderr)
            sys.exit(1)
