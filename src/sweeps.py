"""Hydra multirun sweeps: one result per job, failures contained, a summary at the end.

Each job writes `result.json` into its directory. A failing job records its one-line reason
and returns None, so the sweep carries on (Hydra's sweepers would otherwise stop at the first
exception). When the multirun ends, SweepSummary (a Hydra callback) prints a table of every
job, writes it to `summary.md` in the sweep directory, and plots the best validation loss
against each swept value in `summary.png`, with a power law fitted to loss against model size
and, when seeds repeat, the mean and spread of each configuration.

Under `hydra/launcher=parallel` (Hydra's joblib launcher) jobs run concurrently in worker
processes: each job takes its share of the CPU cores, or its own GPU (configure_job_resources).
"""

from __future__ import annotations

import copy
import functools
import json
import logging
import math
import os
import statistics
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf, open_dict

log = logging.getLogger(__name__)
RESULT = "result.json"
# Overrides that say where or how a job runs, not what it trains: never part of a run name.
NOT_HYPERPARAMETERS = ("paths.", "hydra.", "ckpt_path", "overwrite", "progress_bar", "sample.", "sweep.")
# What a sweep job skips unless `sweep.media=true` or the command line sets these keys itself:
# media cost more than a small job's training, and a sweep is read from its summary.
MEDIA_OFF = {"callbacks.sample_text": None, "callbacks.attention_maps": None, "sample.max_new_tokens": 0}


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


def cpu_cores() -> int:
    """The cores this process may run on (its affinity, not the whole machine's count)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def gpu_count() -> int:
    import torch  # only when a job starts: the sweep summary never needs it

    return torch.cuda.device_count()


def check_sweep_config(cfg: DictConfig) -> None:
    """The `sweep` keys' values, checked before a sweep starts; raises ValueError naming the fix."""
    jobs_per_gpu, media = cfg.sweep.jobs_per_gpu, cfg.sweep.media
    if not isinstance(jobs_per_gpu, int) or isinstance(jobs_per_gpu, bool) or jobs_per_gpu < 1:
        raise ValueError(
            f"sweep.jobs_per_gpu must be a positive integer, got {jobs_per_gpu!r}: e.g. sweep.jobs_per_gpu=2"
        )
    if not isinstance(media, bool):
        raise ValueError(f"sweep.media must be true or false, got {media!r}")


def parallel_jobs(accelerator: str, jobs_per_gpu: int) -> int:
    """hydra/launcher=parallel's default n_jobs: every GPU `jobs_per_gpu` times, else every core."""
    check_sweep_config(OmegaConf.create({"sweep": {"jobs_per_gpu": jobs_per_gpu, "media": False}}))
    gpus = gpu_count() if accelerator in ("auto", "gpu", "cuda") else 0
    return gpus * jobs_per_gpu if gpus else cpu_cores()


OmegaConf.register_new_resolver("parallel_jobs", parallel_jobs, replace=True)


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
    """What one concurrent job may use: torch threads, and a GPU index (None: leave devices as set)."""

    threads: int
    gpu: int | None


def plan_resources(
    job_num: int, concurrent: int, cores: int, gpus: int, accelerator: str, devices: Any
) -> JobResources:
    """Divide the cores among the jobs that run at once; job n takes GPU n mod gpus.

    Jobs are dispatched in order, so the ones running together have consecutive numbers and
    spread evenly over the GPUs: with n_jobs = gpus x jobs_per_gpu, each GPU holds jobs_per_gpu.
    A job asking for several devices (DDP) keeps its own setting.
    """
    threads = max(1, cores // max(1, concurrent))
    on_gpu = gpus > 0 and accelerator in ("auto", "gpu", "cuda") and devices in (1, "1", "auto")
    return JobResources(threads, job_num % gpus if on_gpu and concurrent > 1 else None)


def configure_job_resources(cfg: DictConfig) -> JobResources | None:
    """Called as a sweep job starts: its share of the machine, before torch does any work.

    Sets torch's intra- and inter-op thread counts to cores // concurrent jobs, and pins the
    job to one GPU (trainer.devices=[i]) when jobs run concurrently on a GPU machine. A
    sequential sweep (Hydra's basic launcher) and a single run are left as they are.
    """
    if not in_multirun():
        return None
    hydra_cfg = HydraConfig.get()
    concurrent = concurrent_jobs(hydra_cfg)
    if concurrent == 1:
        return None
    import torch

    plan = plan_resources(
        hydra_cfg.job.num, concurrent, cpu_cores(), gpu_count(), cfg.trainer.accelerator, cfg.trainer.devices
    )
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


def sweep_defaults(cfg: DictConfig) -> DictConfig:
    """A sweep job's config: without the TensorBoard text sample, attention maps and final sample.

    Unless `sweep.media=true`; a key the command line sets itself (e.g. `sample.max_new_tokens=300`
    or `callbacks.attention_maps.prompt=...`) keeps its configured value.
    """
    if not in_multirun() or cfg.get("sweep", {}).get("media", False):
        return cfg
    typed = {o.lstrip("+~").split("=", 1)[0] for o in job_overrides()}
    cfg = copy.deepcopy(cfg)
    with open_dict(cfg):
        for key, value in MEDIA_OFF.items():
            if not any(t == key or t.startswith(key + ".") for t in typed):
                OmegaConf.update(cfg, key, value, merge=False)
    return cfg


def run_job(cfg: DictConfig, train: Callable[[DictConfig], float]) -> float | None:
    """One sweep job: skip it if it already finished, resume it if it was interrupted, contain its failure."""
    output_dir = Path(HydraConfig.get().runtime.output_dir)
    done = read_result(output_dir)
    same_job = done is not None and done.get("overrides") == job_overrides() and not cfg.overwrite
    if same_job and done.get("status") == "ok":
        log.info(
            f"{output_dir} already finished (best val loss {done['best_val_loss']:.4f}): kept; overwrite=true reruns it"
        )
        return done["best_val_loss"]
    last = output_dir / "checkpoints" / "last.ckpt"
    if same_job and done.get("status") == "running" and last.is_file() and cfg.ckpt_path is None:
        log.info(f"{output_dir} was interrupted: resuming it from {last}")
        cfg = copy.deepcopy(cfg)
        with open_dict(cfg):
            cfg.ckpt_path = str(last)
    write_result(output_dir, {"status": "running"})  # what a rerun finds if this job is interrupted
    try:
        configure_job_resources(cfg)
        return train(sweep_defaults(cfg))
    except Exception as err:  # any failure stays inside this job; the sweep goes on
        reason = " ".join(str(err).split()) or type(err).__name__
        if not isinstance(err, (ValueError, OSError)):  # not bad input: keep the trace for debugging
            log.error("".join(traceback.format_exception(err)))
            reason = f"{type(err).__name__}: {reason}"
        print(f"error: job {HydraConfig.get().job.num} ({run_name()}): {reason}", file=sys.stderr)
        write_result(output_dir, {"status": "failed", "reason": reason})
        return None


def finite_loss(row: dict[str, Any]) -> float | None:
    """A finished job's best val loss, or None (failed, missing, or never validated)."""
    loss = row.get("best_val_loss")
    ok = row.get("status") == "ok" and isinstance(loss, (int, float)) and math.isfinite(loss)
    return float(loss) if ok else None


def configuration(row: dict[str, Any]) -> tuple[str, ...]:
    """A job's overrides without its seed: the jobs that differ only by seed share it."""
    return tuple(o for o in row.get("overrides", []) if o.split("=", 1)[0].lstrip("+~") != "seed")


def configuration_label(row: dict[str, Any]) -> str:
    named = row.get("run_name") or " ".join(row.get("overrides", []))
    return ",".join(part for part in named.split(",") if not part.startswith("seed=")) or "(defaults)"


@dataclass
class Group:
    """The jobs of one configuration (its seeds): mean and seed-to-seed spread of the best val loss."""

    label: str
    jobs: list[int]
    losses: list[float]
    parameters: int | None

    @property
    def mean(self) -> float:
        return statistics.fmean(self.losses)

    @property
    def std(self) -> float | None:  # the sample standard deviation; None for a single seed
        return statistics.stdev(self.losses) if len(self.losses) > 1 else None


def seed_groups(rows: list[dict[str, Any]]) -> list[Group] | None:
    """One group per configuration, or None when no configuration ran more than once (no seeds repeat)."""
    groups: dict[tuple[str, ...], Group] = {}
    for row in rows:
        loss = finite_loss(row)
        if loss is None:
            continue
        group = groups.setdefault(configuration(row), Group(configuration_label(row), [], [], row.get("parameters")))
        group.jobs.append(row["job"])
        group.losses.append(loss)
    if all(len(g.losses) == 1 for g in groups.values()):
        return None
    return list(groups.values())


@dataclass
class PowerLaw:
    """L(N) = a * N^(-alpha) + c, fitted to best val loss against parameter count."""

    a: float
    alpha: float
    c: float
    at_edge: bool  # alpha ended at the end of the searched range: the data do not pin it down

    def __call__(self, n: Any) -> Any:
        return self.a * n ** (-self.alpha) + self.c


ALPHA_RANGE = (1e-3, 4.0)


def fit_power_law(sizes: list[float], losses: list[float]) -> PowerLaw:
    """Least squares in alpha: for a fixed alpha, a and c are linear, so search alpha, then refine.

    Sizes are divided by their geometric mean first, so N^(-alpha) stays near 1 for any alpha.
    """
    import numpy as np

    x, y = np.asarray(sizes, dtype=float), np.asarray(losses, dtype=float)
    scale = float(np.exp(np.log(x).mean()))

    def solve(alpha: float) -> tuple[float, Any]:
        design = np.stack([(x / scale) ** -alpha, np.ones_like(x)], axis=1)
        coef = np.linalg.lstsq(design, y, rcond=None)[0]
        return float(((design @ coef - y) ** 2).sum()), coef

    grid = np.geomspace(*ALPHA_RANGE, 200)
    best = int(np.argmin([solve(alpha)[0] for alpha in grid]))
    lo, hi = grid[max(best - 1, 0)], grid[min(best + 1, len(grid) - 1)]
    ratio = (math.sqrt(5) - 1) / 2
    for _ in range(80):  # golden-section search between the best grid point's neighbours
        left, right = hi - ratio * (hi - lo), lo + ratio * (hi - lo)
        if solve(left)[0] <= solve(right)[0]:
            hi = right
        else:
            lo = left
    alpha = (lo + hi) / 2
    a_scaled, c = solve(alpha)[1]
    at_edge = best in (0, len(grid) - 1)
    return PowerLaw(float(a_scaled * scale**alpha), float(alpha), float(c), at_edge)


def scaling(rows: list[dict[str, Any]]) -> tuple[PowerLaw | None, dict[int, float], str]:
    """The power-law fit over the finished jobs, each job's residual (loss - fit), and one line saying so."""
    points = [(row["parameters"], loss, row["job"]) for row in rows if (loss := finite_loss(row)) is not None]
    points = [(n, loss, job) for n, loss, job in points if isinstance(n, (int, float)) and n > 0]
    sizes = sorted({n for n, _, _ in points})
    if len(sizes) < 3:
        return (
            None,
            {},
            (
                f"No fit of loss against model size: {len(sizes)} distinct parameter count(s) among the finished "
                f"jobs, and L(N) = a*N^(-alpha) + c needs at least 3."
            ),
        )
    fit = fit_power_law([n for n, _, _ in points], [loss for _, loss, _ in points])
    residuals = {job: loss - float(fit(n)) for n, loss, job in points}
    if fit.a <= 0:
        return (
            None,
            {},
            (
                f"No power law: over {len(sizes)} sizes the best val loss does not fall with parameter count "
                f"(the best fit has a = {fit.a:.3g} <= 0)."
            ),
        )
    rms = math.sqrt(statistics.fmean(r * r for r in residuals.values()))
    line = (
        f"L(N) = {fit.a:.4g} * N^(-{fit.alpha:.3f}) + {fit.c:.4f}, fitted to {len(points)} jobs over "
        f"{len(sizes)} sizes ({sizes[0]:,} to {sizes[-1]:,} parameters); rms residual {rms:.4f}."
    )
    if fit.at_edge:
        line += f" The exponent is at the end of the searched range {ALPHA_RANGE}: these sizes do not pin it down."
    return fit, residuals, line


def number(value: Any, fmt: str) -> str:
    return format(value, fmt) if isinstance(value, (int, float)) and math.isfinite(value) else "-"


def format_table(rows: list[dict[str, Any]], residuals: dict[int, float] | None = None) -> str:
    columns = ["job", "overrides", "parameters", "best val loss", "bpc", "tokens/s", "wall", "status"]
    if residuals:
        columns.insert(4, "fit residual")
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        status = row.get("status", "missing")
        if status == "failed":
            status = f"FAILED: {row.get('reason', '')}"
        elif status == "ok" and finite_loss(row) is None:
            status = "ok, no finite val loss"
        cells = [
            str(row["job"]),
            row.get("run_name") or " ".join(row.get("overrides", [])),
            number(row.get("parameters"), ","),
            number(row.get("best_val_loss"), ".4f"),
            number(row.get("best_val_bpc"), ".3f"),
            number(row.get("tokens_per_sec"), ",.0f"),
            number(row.get("wall_seconds"), ".0f") + "s",
            status,
        ]
        if residuals:
            cells.insert(4, number(residuals.get(row["job"]), "+.4f"))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def format_groups(groups: list[Group]) -> str:
    """Per configuration: mean best val loss, its seed-to-seed spread and the number of seeds."""
    lines = ["| configuration | parameters | mean best val loss | std | n | jobs |", "|" + "---|" * 6]
    for g in sorted(groups, key=lambda g: g.mean):
        lines.append(
            f"| {g.label} | {number(g.parameters, ',')} | {g.mean:.4f} | {number(g.std, '.4f')} | {len(g.losses)} "
            f"| {', '.join(map(str, g.jobs))} |"
        )
    return "\n".join(lines)


def summary_text(rows: list[dict[str, Any]]) -> tuple[str, PowerLaw | None, dict[int, float]]:
    """summary.md's body: the jobs, the seeds' mean and spread when seeds repeat, the size fit."""
    fit, residuals, fit_line = scaling(rows)
    parts = [format_table(rows, residuals)]
    groups = seed_groups(rows)
    if groups:
        parts.append("## Mean and spread over seeds\n\n" + format_groups(groups))
    parts.append("## Loss against model size\n\n" + fit_line)
    return "\n\n".join(parts), fit, residuals


class SweepSummary(Callback):
    """At the end of a multirun: the table of all jobs (printed and in summary.md) and a plot."""

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        jobs = sorted((p for p in sweep_dir.iterdir() if p.is_dir() and p.name.isdigit()), key=lambda p: int(p.name))
        rows = [{"job": int(p.name), **(read_result(p) or {"status": "missing"})} for p in jobs]
        if not rows:
            return
        table, fit, residuals = summary_text(rows)
        (sweep_dir / "summary.md").write_text(f"# Sweep {sweep_dir}\n\n{table}\n")
        from src.plots import save_png, sweep_figure  # matplotlib only once the sweep is done

        figure = sweep_figure(rows, sorted(swept_keys(config.hydra)), fit, residuals)
        save_png(figure, str(sweep_dir / "summary.png"))
        print(f"\n{table}\n\nsummary: {sweep_dir / 'summary.md'}, plot: {sweep_dir / 'summary.png'}")
        failed = [r["job"] for r in rows if r.get("status") != "ok"]
        if failed:
            print(f"error: {len(failed)} of {len(rows)} jobs failed: {failed}", file=sys.stderr)
            sys.exit(1)
