"""The 12-job sweep at the notes' scale: sequential, parallel, and a loop of nanoGPT's train.py.

`python -m benchmarks.train_speed --only sweep --nanogpt /tmp/nanogpt` runs, in alternating rounds:
  sequential  `python -m src.train -m <grid>` (Hydra's basic launcher: one process, jobs in turn)
  parallel    the same with `hydra/launcher=parallel` (Hydra's joblib launcher, one job per core)
  nanoGPT     its train.py once per configuration, one after another, with its documented CPU
              flags, `--eval_iters=20` and `--eval_interval=300` (it evaluates at iteration 0 and 300)

Two extra callbacks time each job of our sweeps: JobClock (a Hydra callback: the job's start and
end, and when its process started) and PhaseTimer (a Lightning callback: training steps,
validation, and what happens between). From them: the fraction of the sweep's wall spent in
training steps, and where each job's time outside training goes.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import lightning as L

from benchmarks.nanogpt import NANOGPT_ARGS, prepare_nanogpt_data

ROOT = Path(__file__).resolve().parent.parent
GRID = {"num_heads": [2, 3, 5], "embedding_dim": [30, 60], "context_window": [10, 20]}
COMMON = ["model.num_layers=1", "data.batch_size=12", "trainer.max_steps=300", "trainer.val_check_interval=300"]
NANOGPT_NAMES = {"num_heads": "n_head", "embedding_dim": "n_embd", "context_window": "block_size"}
PHASES = ("imports", "data and model", "trainer", "fit start", "training steps", "validation", "media and checkpoint")
PHASES += ("after training",)


def process_start() -> float:
    """When this process started (Unix time), from /proc: imports happen between it and the first job."""
    ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
    boot = next(float(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines() if line[:5] == "btime")
    return boot + ticks / os.sysconf("SC_CLK_TCK")


try:  # the Hydra callback base class; the benchmark driver itself does not need it
    from hydra.experimental.callback import Callback as HydraCallback
except ImportError:  # pragma: no cover
    HydraCallback = object


class JobClock(HydraCallback):
    """Writes clock.json into each job directory: process start, job start, job end, process id."""

    def on_job_start(self, config: Any, **kwargs: Any) -> None:
        self.start = time.time()

    def on_job_end(self, config: Any, job_return: Any, **kwargs: Any) -> None:
        record = {"process_start": process_start(), "start": self.start, "end": time.time(), "pid": os.getpid()}
        Path(config.hydra.runtime.output_dir, "clock.json").write_text(json.dumps(record))


class PhaseTimer(L.Callback):
    """Writes phases.json into the run directory: when each part of fit began and ended (Unix time)."""

    def __init__(self) -> None:
        self.times: dict[str, Any] = {"built": time.time(), "batches": [], "validations": []}

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.times["fit_start"] = time.time()

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.times["train_start"] = time.time()

    def on_train_batch_start(self, trainer: L.Trainer, *args: Any) -> None:
        self.times["batches"].append([time.time(), None])

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        self.times["batches"][-1][1] = time.time()

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.times["validations"].append([time.time(), None, None])

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.times["validations"][-1][1] = time.time()  # the loss is computed; media come next

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.times["validations"][-1][2] = time.time()

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.times["train_end"] = time.time()
        Path(trainer.default_root_dir, "phases.json").write_text(json.dumps(self.times))


def job_phases(job_dir: Path) -> dict[str, float]:
    """Seconds per phase of one job. A training step runs from the previous step's end (or, after
    a validation or at the start, from its own start) to its end, so data loading is part of it."""
    clock = json.loads((job_dir / "clock.json").read_text())
    t = json.loads((job_dir / "phases.json").read_text())
    validation = sum(epoch_end - start for start, epoch_end, _ in t["validations"])
    training, previous = 0.0, None
    for start, end in t["batches"]:
        interrupted = previous is None or any(previous <= v[0] <= start for v in t["validations"])
        training += end - (start if interrupted else previous)
        previous = end
    loop = t["train_end"] - t["train_start"]
    return {
        "data and model": t["built"] - clock["start"],
        "trainer": t["fit_start"] - t["built"],
        "fit start": t["train_start"] - t["fit_start"],
        "training steps": training,
        "validation": validation,
        "media and checkpoint": loop - training - validation,
        "after training": clock["end"] - t["train_end"],
    }


def grid_overrides() -> list[str]:
    return [f"model.{key}={','.join(map(str, values))}" for key, values in GRID.items()]


def run_sweep(launcher: str, workdir: Path) -> dict[str, Any]:
    """One sweep as a user types it, plus the two timing callbacks; its wall time and what the jobs did."""
    sweep_dir = workdir / f"sweep-{launcher}-{time.time_ns()}"
    command = [
        *(sys.executable, "-m", "src.train", "-m", *COMMON, *grid_overrides()),
        *(f"hydra/launcher={launcher}", f"hydra.sweep.dir={sweep_dir}"),
        "+callbacks.phase_timer._target_=benchmarks.sweep_speed.PhaseTimer",
        "+hydra.callbacks.job_clock._target_=benchmarks.sweep_speed.JobClock",
    ]
    start = time.time()
    proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    wall = time.time() - start
    if proc.returncode != 0:
        raise SystemExit(f"the {launcher} sweep failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return sweep_record(sweep_dir, wall)


def sweep_record(sweep_dir: Path, wall: float) -> dict[str, Any]:
    """What the jobs of a finished sweep did, from the files the two timing callbacks wrote."""
    jobs = sorted((p for p in sweep_dir.iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
    phases = [job_phases(job) for job in jobs]
    clocks = [json.loads((job / "clock.json").read_text()) for job in jobs]
    first_job: dict[int, float] = {}  # per process: its imports run from its start to its first job
    for clock in clocks:
        first_job[clock["pid"]] = min(first_job.get(clock["pid"], clock["start"]), clock["start"])
    imports = sum(first_job[pid] - next(c["process_start"] for c in clocks if c["pid"] == pid) for pid in first_job)
    workers = len(first_job)
    training = sum(p["training steps"] for p in phases)
    return {
        "wall_s": wall,
        "processes": workers,
        "val_losses": [json.loads((job / "result.json").read_text())["best_val_loss"] for job in jobs],
        "training_steps_s": training,
        # the share of the CPU time the sweep had (wall x jobs running at once) spent in training steps
        "training_fraction": training / (wall * workers),
        "per_job_s": {name: statistics.fmean(p[name] for p in phases) for name in PHASES[1:]},
        "imports_s_per_process": imports / workers,
    }


def configurations() -> list[dict[str, int]]:
    """The grid in Hydra's order (the last key varies fastest), so job n is configuration n."""
    sizes = [{}]
    for key, values in GRID.items():
        sizes = [size | {key: value} for size in sizes for value in values]
    return sizes


def run_nanogpt(nanogpt: Path, size: dict[str, int], workdir: Path) -> tuple[float, float | None]:
    """nanoGPT's train.py for one configuration: its wall time and its val loss at iteration 300."""
    prepare_nanogpt_data(nanogpt)
    command = [
        *(sys.executable, "train.py", *NANOGPT_ARGS, "--n_layer=1", "--batch_size=12"),
        *(f"--{NANOGPT_NAMES[key]}={value}" for key, value in size.items()),
        *("--max_iters=300", "--lr_decay_iters=300", "--eval_interval=300"),
        f"--out_dir={workdir / 'nanogpt-out'}",
    ]
    start = time.time()
    proc = subprocess.run(command, cwd=nanogpt, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"nanoGPT failed (exit {proc.returncode}):\n{proc.stdout[-2000:]}")
    last = [line for line in proc.stdout.splitlines() if line.startswith("step 300:")]
    return time.time() - start, float(last[-1].split("val loss ")[1]) if last else None


def run_nanogpt_loop(nanogpt: Path, workdir: Path) -> dict[str, Any]:
    """nanoGPT's train.py once per configuration of the grid, one after another."""
    runs = [run_nanogpt(nanogpt, size, workdir) for size in configurations()]
    return {"wall_s": sum(wall for wall, _ in runs), "val_losses": [loss for _, loss in runs]}


def sweep(args: Any, workdir: Path) -> dict[str, Any]:
    """Alternating rounds of the three; medians of the wall times, and the ratios to nanoGPT."""
    walls: dict[str, list[float]] = {"sequential": [], "parallel": [], "nanogpt": []}
    last: dict[str, dict] = {}
    for r in range(args.rounds):
        for side in ("sequential", "parallel"):
            last[side] = run_sweep("basic" if side == "sequential" else "parallel", workdir)
            walls[side].append(last[side]["wall_s"])
        if args.nanogpt:
            last["nanogpt"] = run_nanogpt_loop(args.nanogpt, workdir)
            walls["nanogpt"].append(last["nanogpt"]["wall_s"])
        print(f"  round {r + 1}: " + ", ".join(f"{k} {v[-1]:.1f} s" for k, v in walls.items() if v), flush=True)
    result: dict[str, Any] = {"rounds": walls}
    for side in ("sequential", "parallel"):
        result[side] = {k: v for k, v in last[side].items() if k != "wall_s"} | {
            "wall_s": statistics.median(walls[side])
        }
    sequential, parallel = last["sequential"]["val_losses"], last["parallel"]["val_losses"]
    result["parallel_matches_sequential"] = max(abs(a - b) for a, b in zip(sequential, parallel, strict=True))
    if args.nanogpt:
        result["nanogpt"] = last["nanogpt"] | {"wall_s": statistics.median(walls["nanogpt"])}
        for side in ("sequential", "parallel"):
            result[side]["speedup_vs_nanogpt"] = result["nanogpt"]["wall_s"] / result[side]["wall_s"]
    result["parallel_vs_sequential"] = result["sequential"]["wall_s"] / result["parallel"]["wall_s"]
    return result


def table(result: dict[str, Any]) -> list[str]:
    """Rows for train_speed's Markdown table."""
    rows = []
    nano = result.get("nanogpt", {}).get("wall_s")
    for side in ("sequential", "parallel"):
        r = result[side]
        ratio = f"{r['speedup_vs_nanogpt']:.2f}x" if "speedup_vs_nanogpt" in r else ""
        rows.append(
            f"| 12-job sweep (notes scale, 300 steps), {side}: wall s (share in training steps)"
            f" | {r['wall_s']:.1f} ({100 * r['training_fraction']:.0f}%) | {nano or 0:.1f} | {ratio} |"
        )
    return rows
