"""A multirun before it starts: each point's sweep keys and what its launcher can run."""

from __future__ import annotations

from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig

from src import rules
from src.rules import positive_int
from src.sweeps import resources  # noqa: F401  (registers parallel_jobs, the parallel launcher's default n_jobs)


def check_launcher(cfg: DictConfig, launcher: str) -> None:
    """What a launcher can run of a job's trainer; raises ValueError saying what works."""
    if launcher == "parallel" and str(cfg.trainer.strategy).startswith("ddp"):
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


def launcher_jobs(n_jobs: Any) -> None:
    """hydra/launcher=parallel's n_jobs, in joblib's convention (-1: every core, -2: all but one)."""
    if not rules.is_int(n_jobs) or n_jobs == 0:
        rules.refuse(
            "hydra.launcher.n_jobs", n_jobs, "a non-zero integer", "the number of jobs at once, or -1 for every core"
        )


def check_sweep_job(cfg: DictConfig, point: list[str]) -> None:
    """One point of a multirun before the sweep starts: its sweep keys and what its launcher can run."""
    positive_int("sweep.jobs_per_gpu", cfg.sweep.jobs_per_gpu, "e.g. sweep.jobs_per_gpu=2")
    chosen = [o.split("=", 1)[1] for o in point if o.lstrip("+~").startswith("hydra/launcher=")]
    launcher = chosen[-1] if chosen else "basic"  # Hydra's default
    check_launcher(cfg, launcher)
    typed = [o for o in point if o.startswith("hydra.launcher.n_jobs=")]
    if typed and launcher == "parallel":  # Hydra's keys are not in cfg: read as typed
        launcher_jobs(OverridesParser.create().parse_overrides(typed[-1:])[0].value())
