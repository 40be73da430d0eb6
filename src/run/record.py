"""A run's record: its result.json, with its run name (the overrides a sweep varies), which a
resume, a sweep's rerun and its summary read back."""

from __future__ import annotations

import functools
import itertools
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

RESULT = "result.json"
# Overrides that say where or how a job runs, not what it trains: never part of a run name or a job's identity.
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
    """The keys given sweep syntax in multirun.yaml's command line, read once per sweep (BENCHMARKS.md, "Sweeps")."""
    original = OmegaConf.load(sweep_file).hydra.overrides.task
    overrides = OverridesParser.create().parse_overrides(list(original))
    return frozenset(o.get_key_element() for o in overrides if o.is_sweep_override())


def varied_keys() -> list[str]:
    """The keys that set this run apart (`model.num_heads`): a sweep's swept keys, or those a single
    run's command line set; never NOT_HYPERPARAMETERS."""
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
    """Whether a job directory's record is this job's: the same hyperparameters (none recorded: yes)."""

    def hyperparameters(given: Sequence[str]) -> dict[str, str]:  # the last of a key wins, as in Hydra
        kept = [o for o in given if not o.lstrip("+~").startswith(NOT_HYPERPARAMETERS)]
        return {o.split("=", 1)[0].lstrip("+"): o.split("=", 1)[-1] for o in kept}

    return recorded is None or hyperparameters(recorded) == hyperparameters(overrides)


def resumable(record: dict[str, Any]) -> bool:
    """A job that stopped before its end (died, signalled, its worker killed) and may go on from last.ckpt."""
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


def sweep_points(overrides: list[str]) -> list[list[str]]:
    """Every combination a basic multirun would launch (`a=1,2 b=3,4` gives four), in its order; a key
    given twice takes the later value, at its first place."""
    choices: dict[str, list[str]] = {}
    for o in OverridesParser.create().parse_overrides(overrides):
        try:
            values = o.sweep_string_iterator() if o.is_sweep_override() else [o.get_value_element_as_str()]
            choices[o.get_key_element()] = [f"{o.get_key_element()}={v}" for v in values]  # as a job's overrides
        except HydraException:  # a search space (an Optuna interval): its sweeper draws the values
            choices[o.get_key_element()] = [o.input_line]
    return [list(point) for point in itertools.product(*choices.values())]
