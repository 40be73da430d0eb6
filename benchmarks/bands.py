"""`python -m benchmarks.bands [--seeds 5] [--name NAME] [overrides]`: make the reference band of a config
(src/training/bands.py): train it with seeds 0..k-1, one after another in this process, and write the
mean, std, min and max of the val loss at each validation to conf/bands/NAME.json (NAME: the
`experiment=` override, or `default`), with the torch version and CPU it was made on.

    nice -n 15 .venv/bin/python -m benchmarks.bands experiment=induction_heads

Each seed trains as `python -m src.train <overrides> seed=<k>` would; what cannot change its val losses is
skipped: what comes after training (the sample, the page), the TensorBoard events, and with dropout 0 the
validations' samples, attention maps and head scores.
"""

from __future__ import annotations

import argparse
import datetime
import json
import multiprocessing
import os
import platform
import statistics
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import lightning as L
import torch

from src.run.cli import compose
from src.run.preflight import open_text
from src.training.bands import config_key
from src.training.callbacks import reported_validation

ROOT = Path(__file__).resolve().parents[1]
# What a validation draws and writes beside its loss: skipped where training draws no random numbers of its
# own (dropout 0, every preset's), since then they cannot change the losses, only the time.
MEDIA = ("sample_text", "attention_maps", "head_scores")


class Curve(L.Callback):
    """The val loss at each of the run's validations, step 0's included."""

    def __init__(self) -> None:
        self.losses: dict[str, float] = {}

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if reported_validation(trainer) and "val/loss" in trainer.callback_metrics:
            self.losses[str(trainer.global_step)] = float(trainer.callback_metrics["val/loss"])


def cpu_name() -> str:
    try:
        names = [line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")]
        return f"{names[0]}, {len(names)} cores" if names else platform.processor()
    except OSError:
        return platform.processor()


def seed_curve(overrides: list[str], seed: int, run_dir: Path, threads: int | None = None) -> dict[str, float]:
    """The val curve of one seed, trained by train(cfg) with a Curve callback beside the config's own;
    threads: torch's threads for it (None: torch's default)."""
    from src.train import plan_and_build, train

    os.environ.setdefault("PROJECT_ROOT", str(ROOT))
    if threads is not None:
        torch.set_num_threads(threads)

    after = ["~logger", "sample.max_new_tokens=0", "explorer=false", "callbacks.band=null", "progress_bar=false"]
    cfg = compose("train", [*overrides, f"seed={seed}", f"paths.output_dir={run_dir}", *after])
    if not cfg.model.get("dropout"):  # nothing random in training but its batches (their own generators)
        media = [f"callbacks.{name}=null" for name in MEDIA if cfg.callbacks.get(name) is not None]
        cfg = compose("train", [*overrides, f"seed={seed}", f"paths.output_dir={run_dir}", *after, *media])
    plan, run = plan_and_build(cfg, run_dir, "paths.output_dir")
    curve = Curve()
    run.trainer.callbacks.append(curve)
    train(cfg, (plan, run))
    return curve.losses


def band_of(curves: list[dict[str, float]]) -> dict[str, dict[str, float]]:
    """Per step: mean, std (ddof 1), min, max of the seeds' val losses."""
    steps = sorted(set.intersection(*(set(c) for c in curves)), key=int)
    out = {}
    for step in steps:
        values = [c[step] for c in curves]
        out[step] = {
            "mean": statistics.fmean(values),
            "std": statistics.stdev(values),
            "min": min(values),
            "max": max(values),
            "n": len(values),
        }
    return out


def main() -> None:
    os.environ.setdefault("PROJECT_ROOT", str(ROOT))  # as the commands set it (src/run/cli.py)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=5, help="seeds 0..k-1 (at least 2; the presets' bands use 5)")
    parser.add_argument("--name", default=None, help="the band's file name in conf/bands/ (default: the preset's)")
    parser.add_argument("--out", default=None, help="another folder for the file")
    parser.add_argument(
        "--jobs", type=int, default=1, help="seeds trained at once, each in a process of its own with one thread"
    )
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    if args.seeds < 2:
        parser.error("--seeds must be at least 2: a spread needs two seeds")
    preset = next((o.split("=", 1)[1] for o in args.overrides if o.startswith("experiment=")), "default")
    name = args.name or preset
    flags = ([f"--seeds {args.seeds}"] if args.seeds != 5 else []) + ([f"--jobs {args.jobs}"] if args.jobs > 1 else [])
    command = " ".join(["nice -n 15 python -m benchmarks.bands", *flags, *args.overrides])
    cfg = compose("train", list(args.overrides))
    key = config_key(cfg, open_text(cfg.data).sha256)
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="bands-") as tmp:
        runs = [(list(args.overrides), seed, Path(tmp) / f"seed{seed}") for seed in range(args.seeds)]
        if args.jobs > 1:  # a shared machine: one thread per run wastes no time waiting for a descheduled twin
            pool = ProcessPoolExecutor(args.jobs, mp_context=multiprocessing.get_context("spawn"))
            with pool:
                curves = list(pool.map(seed_curve, *zip(*runs, strict=True), [1] * args.seeds))
        else:
            curves = [seed_curve(*run) for run in runs]
    for seed, curve in enumerate(curves):
        print(f"seed {seed}: val loss {curve[max(curve, key=int)]:.4f} at step {max(curve, key=int)}")
    band: dict[str, Any] = {
        "preset": preset,
        "command": command,
        "made": {
            "date": datetime.date.today().isoformat(),
            "torch": torch.__version__,
            "cpu": cpu_name(),
            "threads": 1 if args.jobs > 1 else torch.get_num_threads(),
            "jobs": args.jobs,
            "seconds": round(time.time() - started),
        },
        "seeds": list(range(args.seeds)),
        "config": key,
        "steps": band_of(curves),
    }
    out = Path(args.out or ROOT / "conf" / "bands") / f"{name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(band, indent=1) + "\n")
    last = max(band["steps"], key=int)
    s = band["steps"][last]
    print(f"{out}: step {last} val loss {s['mean']:.4f} +- {s['std']:.4f} (min {s['min']:.4f}, max {s['max']:.4f})")


if __name__ == "__main__":
    main()
