"""A parallel sweep's jobs sharing the machine: how many run at once, each one's threads and GPU."""

from __future__ import annotations

import fcntl
import logging
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig, OmegaConf, open_dict

from src import rules
from src.run.record import in_multirun

log = logging.getLogger(__name__)


def cpu_cores() -> int:
    """The cores this process may run on (its affinity, not the whole machine's count)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def gpu_count() -> int:
    import torch  # only when a job starts: the sweep summary never needs it

    return torch.cuda.device_count()


def parallel_jobs(accelerator: str, jobs_per_gpu: int) -> int:
    """hydra/launcher=parallel's default n_jobs: every GPU `jobs_per_gpu` times, else every core."""
    rules.positive_int("sweep.jobs_per_gpu", jobs_per_gpu, "e.g. sweep.jobs_per_gpu=2")
    gpus = gpu_count() if accelerator in ("auto", "gpu", "cuda") else 0
    return gpus * jobs_per_gpu if gpus else cpu_cores()


OmegaConf.register_new_resolver("parallel_jobs", parallel_jobs, replace=True)


def sweep_size(hydra_cfg: DictConfig) -> int | None:
    """How many jobs the sweeper hands the launcher at once: the grid's size, or Optuna's one trial."""
    if "n_trials" in hydra_cfg.sweeper:  # Optuna: one trial at a time (src/sweeps/search.py)
        return 1
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
    """What one concurrent job may use: torch threads, a GPU (None: devices as set) and its slot's lock."""

    threads: int
    gpu: int | None
    slot: int | None = None

    def release(self) -> None:
        if self.slot is not None:
            os.close(self.slot)  # the kernel drops the lock with the descriptor, also on kill -9
            self.slot = None


def plan_resources(concurrent: int, cores: int, gpus: int, accelerator: str, devices: Any) -> tuple[int, bool]:
    """Cores // jobs at once, and whether each job takes a GPU of its own (a DDP job keeps its devices)."""
    threads = max(1, cores // max(1, concurrent))
    on_gpu = gpus > 0 and accelerator in ("auto", "gpu", "cuda") and devices in (1, "1", "auto") and concurrent > 1
    return threads, on_gpu


def take_gpu_slot(sweep_dir: Path, gpus: int, jobs_per_gpu: int, wait: float = 1.0) -> tuple[int, int]:
    """(GPU index, the locked descriptor that holds its slot until the job ends): a lock file per slot,
    every GPU's first slot tried before any second one. Jobs end at uneven times, so a job number says
    nothing about which GPU is free; a lock does. If every slot is taken, wait for one."""
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
    """A concurrent sweep job's share of the machine, before torch does any work: its threads, and a
    free GPU slot (trainer.devices=[i]) that the caller releases when the job ends."""
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
