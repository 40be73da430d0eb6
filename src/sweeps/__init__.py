"""What every run and every sweep job needs from Hydra: its result.json, its run name, its run folder.

Each run writes `result.json` into its directory, with its run name (the overrides a sweep varies);
a sweep's rerun and summary read it back. The resolvers the configs use are registered here
(run_folder, rank_zero, rank_log, parallel_jobs), as are the checks of a multirun's points before
it starts (check_sweep_job).

The rest of a sweep lives where it happens, loaded only by a multirun: a job's side in
src/sweeps/job.py, the machine shared among parallel jobs in src/sweeps/resources.py, the main
process's start and summary in src/sweeps/summary.py (reached through the Hydra callback of
src/sweeps/callback.py), the parallel launcher in src/sweeps/launcher.py.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from src import rules

RESULT = "result.json"
# Overrides that say where or how a job runs, not what it trains: never part of a run name, nor of
# what makes two jobs the same job (a sweep job resumed with `python -m src.train ckpt_path=<job>`).
NOT_HYPERPARAMETERS = ("paths.", "hydra.", "ckpt_path", "overwrite", "progress_bar", "sample.", "sweep.")


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
    asks three times (its run name, result.json twice); what parsing it costs a sweep: BENCHMARKS.md, "Sweeps"."""
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
