"""A run's record: its result.json, with its run name (the overrides a sweep varies), which a
resume, a sweep's rerun and its summary read back."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import OmegaConf

RESULT = "result.json"
# Overrides that say where or how a job runs, not what it trains: never part of a run name or a job's identity.
NOT_HYPERPARAMETERS = ("paths.", "hydra.", "ckpt_path", "overwrite", "progress_bar", "sample.", "sweep.")


def in_multirun() -> bool:
    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


def job_overrides() -> list[str]:
    return list(HydraConfig.get().overrides.task) if HydraConfig.initialized() else []


def varied_keys(swept: set[str] | None = None) -> list[str]:
    """The keys that set this run apart (`model.num_heads`): a sweep's `swept` keys, or those a single
    run's command line set; never NOT_HYPERPARAMETERS."""
    keys = swept if swept is not None else {o.lstrip("+~").split("=", 1)[0] for o in job_overrides()}
    return sorted(k for k in keys if not k.startswith(NOT_HYPERPARAMETERS))


def same_job(recorded: Sequence[str] | None, overrides: Sequence[str]) -> bool:
    """Whether a job directory's record is this job's: the same hyperparameters (none recorded: yes)."""

    def hyperparameters(given: Sequence[str]) -> dict[str, str]:  # the last of a key wins, as in Hydra
        kept = [o for o in given if not o.lstrip("+~").startswith(NOT_HYPERPARAMETERS)]
        return {o.split("=", 1)[0].lstrip("+"): o.split("=", 1)[-1] for o in kept}

    return recorded is None or hyperparameters(recorded) == hyperparameters(overrides)


def resumable(record: dict[str, Any]) -> bool:
    """A job that stopped before its end (died, signalled, its worker killed) and may go on from last.ckpt."""
    return record.get("status") in ("running", "interrupted") or bool(record.get("resumable"))


def write_result(output_dir: str | Path, result: dict[str, Any]) -> None:
    """This job's record, with its overrides."""
    write_record(Path(output_dir), {"overrides": job_overrides(), **result})


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


def run_state(run_dir: Path) -> str | None:
    """What a new run in run_dir would overwrite: "finished", "interrupted" (a checkpoint without an
    end) or None (nothing saved)."""
    done = read_result(run_dir)
    if done is not None and not resumable(done) and done.get("status") != "failed":
        return "finished"
    if any((run_dir / "checkpoints" / name).is_file() for name in ("last.ckpt", "best.ckpt")):
        return "interrupted"
    return None


def saved_overrides(run_dir: Path) -> list[str] | None:
    """The overrides run_dir's run was started with (Hydra's .hydra/overrides.yaml), if any."""
    saved = run_dir / ".hydra" / "overrides.yaml"
    try:
        return [str(o) for o in OmegaConf.load(saved)] if saved.is_file() else None
    except (OSError, ValueError):
        return None
