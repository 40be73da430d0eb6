"""Hydra multirun sweeps: one result per job, failures contained, a summary at the end.

Each job writes `result.json` into its directory. A failing job records its one-line reason
and returns None, so the sweep carries on (Hydra's sweepers would otherwise stop at the first
exception). When the multirun ends, SweepSummary (a Hydra callback) prints a table of every
job, writes it to `summary.md` in the sweep directory, and plots the best validation loss
against each swept value in `summary.png`.
"""

from __future__ import annotations

import json
import logging
import math
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

log = logging.getLogger(__name__)
RESULT = "result.json"
# Overrides that say where or how a job runs, not what it trains: never part of a run name.
NOT_HYPERPARAMETERS = ("paths.", "hydra.", "ckpt_path", "overwrite", "progress_bar", "sample.")


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
        original = OmegaConf.load(sweep_file).hydra.overrides.task
        for override in OverridesParser.create().parse_overrides(list(original)):
            if override.is_sweep_override():
                keys.add(override.get_key_element())
    return keys


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
    path = Path(output_dir) / RESULT
    record = {"overrides": job_overrides(), "run_name": run_name(), **result}
    path.write_text(json.dumps(record, indent=2, default=float))


def read_result(job_dir: Path) -> dict[str, Any] | None:
    try:
        return json.loads((job_dir / RESULT).read_text())
    except (OSError, ValueError):
        return None


def run_job(cfg: DictConfig, train: Callable[[DictConfig], float]) -> float | None:
    """One sweep job: skip it if it already finished, contain its failure if it fails."""
    output_dir = Path(HydraConfig.get().runtime.output_dir)
    done = read_result(output_dir)
    if done and done.get("status") == "ok" and done.get("overrides") == job_overrides() and not cfg.overwrite:
        log.info(
            f"{output_dir} already finished (best val loss {done['best_val_loss']:.4f}): kept; overwrite=true reruns it"
        )
        return done["best_val_loss"]
    try:
        return train(cfg)
    except Exception as err:  # any failure stays inside this job; the sweep goes on
        reason = " ".join(str(err).split()) or type(err).__name__
        if not isinstance(err, (ValueError, OSError)):  # not bad input: keep the trace for debugging
            log.error("".join(traceback.format_exception(err)))
            reason = f"{type(err).__name__}: {reason}"
        print(f"error: job {HydraConfig.get().job.num} ({run_name()}): {reason}", file=sys.stderr)
        write_result(output_dir, {"status": "failed", "reason": reason})
        return None


def format_table(rows: list[dict[str, Any]]) -> str:
    header = "| job | overrides | parameters | best val loss | bpc | tokens/s | wall | status |"
    lines = [header, "|" + "---|" * 8]

    def number(value: Any, fmt: str) -> str:
        return format(value, fmt) if isinstance(value, (int, float)) and math.isfinite(value) else "-"

    for row in rows:
        status = row.get("status", "missing")
        if status == "failed":
            status = f"FAILED: {row.get('reason', '')}"
        lines.append(
            f"| {row['job']} | {row.get('run_name') or ' '.join(row.get('overrides', []))} "
            f"| {number(row.get('parameters'), ',')} "
            f"| {number(row.get('best_val_loss'), '.4f')} | {number(row.get('best_val_bpc'), '.3f')} "
            f"| {number(row.get('tokens_per_sec'), ',.0f')} | {number(row.get('wall_seconds'), '.0f')}s | {status} |"
        )
    return "\n".join(lines)


class SweepSummary(Callback):
    """At the end of a multirun: the table of all jobs (printed and in summary.md) and a plot."""

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        jobs = sorted((p for p in sweep_dir.iterdir() if p.is_dir() and p.name.isdigit()), key=lambda p: int(p.name))
        rows = [{"job": int(p.name), **(read_result(p) or {"status": "missing"})} for p in jobs]
        if not rows:
            return
        table = format_table(rows)
        (sweep_dir / "summary.md").write_text(f"# Sweep {sweep_dir}\n\n{table}\n")
        from src.plots import save_png, sweep_figure  # matplotlib only once the sweep is done

        save_png(sweep_figure(rows, sorted(swept_keys(config.hydra))), str(sweep_dir / "summary.png"))
        print(f"\n{table}\n\nsummary: {sweep_dir / 'summary.md'}, plot: {sweep_dir / 'summary.png'}")
        failed = [r["job"] for r in rows if r.get("status") != "ok"]
        if failed:
            print(f"error: {len(failed)} of {len(rows)} jobs failed: {failed}", file=sys.stderr)
            sys.exit(1)
