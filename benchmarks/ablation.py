"""Each modern switch alone against today's default, at equal wall-clock, over seeds.

    python -m benchmarks.ablation --size speedrun --seconds 30 --seeds 3 --out outputs/ablation/speedrun
    python -m benchmarks.ablation --size default --seconds 45 --seeds 3 --out outputs/ablation/default
    python -m src.compare outputs/ablation/speedrun --baseline baseline

Equal wall-clock, measured so that the machine's noise cannot reach the losses: first each
configuration's training step (forward, backward, optimizer: what differs between them; the
loop around it is the same for all) is timed in this process, the configurations taking turns,
then each trains for the steps its median step fits into `--seconds` (its cosine schedule ending
there). Timing a whole run with
`trainer.max_time` instead would let a burst of other work on a shared machine decide how far a
run gets; here a run's loss depends only on its seed and its step budget, and the runs
themselves may share the CPU (`--jobs`). Only the final validation runs (no check at step 0, no
head scores or media).

Every run uses `--threads` threads (1 by default), so the figures hold for one core of this CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf

from benchmarks.step_compile import VOCAB, Steps  # VOCAB: Tiny Shakespeare's 65 characters
from src.compare import welch
from src.model import build_model
from src.run.cli import compose
from src.training.optim import build_optimizer

SWITCHES: dict[str, list[str]] = {
    "baseline": [],
    "rope": ["model.positional=rope"],
    "rms": ["model.norm=rms"],
    "relu2": ["model.activation=relu2"],
    "swiglu": ["model.activation=swiglu"],
    "qk_norm": ["model.qk_norm=true"],
    "gqa": ["model.num_kv_heads=2"],
    "softcap": ["model.logit_softcap=15"],
    "value_embeddings": ["model.value_embeddings=true"],
    "muon": ["optimizer=muon", "optimizer.lr=0.02", "optimizer.min_lr=0.002"],  # its own rates
    "muon_bf16": ["optimizer=muon", "optimizer.lr=0.02", "optimizer.min_lr=0.002", "optimizer.ns_dtype=bfloat16"],
    "bf16": ["trainer.precision=bf16-mixed"],  # not a model switch: the CPU's bfloat16 matmuls under autocast
}
SIZES: dict[str, list[str]] = {"default": [], "speedrun": ["experiment=cpu_speedrun"]}
QUIET = [  # nothing but training and one validation at the end
    "trainer.num_sanity_val_steps=0",
    "callbacks.head_scores=null",
    "callbacks.sample_text=null",
    "callbacks.attention_maps=null",
    "sample.max_new_tokens=0",
    "explorer=false",
]


def train(overrides: list[str], run_dir: Path, args: argparse.Namespace) -> subprocess.Popen:
    """Start one `python -m src.train` process."""
    command = [sys.executable, "-m", "src.train", *overrides, f"hydra.run.dir={run_dir}"]
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    return subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen, run_dir: Path) -> dict:
    _, stderr = proc.communicate()
    if proc.returncode != 0:
        raise SystemExit(f"error: {' '.join(proc.args)} ended with {proc.returncode}:\n{stderr[-2000:]}")
    return json.loads((run_dir / "result.json").read_text())


def steps_of(cfg: DictConfig) -> Steps:
    """One configuration's training step (forward, cross-entropy, backward, clipping, optimizer) on
    one fixed batch, as the run takes it (bfloat16 autocast under bf16-mixed)."""
    torch.manual_seed(0)
    model = build_model(OmegaConf.to_container(cfg.model, resolve=True), VOCAB)
    optimizer = build_optimizer(model, OmegaConf.to_container(cfg.optimizer, resolve=True))
    bf16 = str(cfg.trainer.precision).startswith("bf16")
    return Steps(model, cfg.model.context_window, optimizer, cfg.data.batch_size, bf16)


def step_seconds(base: list[str], args: argparse.Namespace) -> dict[str, float]:
    """The median training step of each configuration, in this process, configurations taking turns
    (the order reversed every turn), so a change in the machine's speed reaches all of them alike."""
    torch.set_num_threads(args.threads)
    steppers = {name: steps_of(compose("train", [*base, *SWITCHES[name]])) for name in args.switches}
    for stepper in steppers.values():
        stepper.take(5)  # warm-up, not counted
        stepper.seconds.clear()
    for turn in range(args.turns):
        for stepper in list(steppers.values())[:: 1 if turn % 2 == 0 else -1]:
            stepper.take(args.steps_per_turn)
    medians = {name: statistics.median(stepper.seconds) for name, stepper in steppers.items()}
    for name, median in medians.items():
        print(f"step {name:17s} {1000 * median:7.2f} ms (median of {len(steppers[name].seconds)} steps)", flush=True)
    return medians


def table(record: dict) -> str:
    """The markdown table of a finished ablation: each switch's val loss against the baseline's."""
    losses: dict[str, list[float]] = {}
    for run in record["runs"]:
        losses.setdefault(run["switch"], []).append(run["best_val_loss"])
    steps = {run["switch"]: run["steps"] for run in record["runs"]}
    base = losses["baseline"]
    lines = [
        "| switch | step, ms | steps in the time | val loss, mean ± sd (seeds) | minus baseline | Welch p |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for name, values in losses.items():
        mean, sd = statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else float("nan")
        cells = [name, f"{record['step_ms'][name]:.1f}", str(steps[name]), f"{mean:.4f} ± {sd:.4f} ({len(values)})"]
        if name == "baseline":
            cells += ["", ""]
        else:
            _, _, p = welch(values, base)
            cells += [f"{mean - statistics.fmean(base):+.4f}", f"{p:.2g}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", choices=sorted(SIZES), default="speedrun")
    parser.add_argument("--seconds", type=float, default=30, help="the training time every configuration gets")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--turns", type=int, default=12, help="turns of the step timing")
    parser.add_argument("--steps-per-turn", type=int, default=8)
    parser.add_argument("--switches", nargs="+", default=list(SWITCHES), choices=list(SWITCHES))
    parser.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS of every run")
    parser.add_argument("--jobs", type=int, default=2, help="training runs at once")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--report", action="store_true", help="only print the table of a finished ablation in --out")
    args = parser.parse_args()
    if args.report:
        print(table(json.loads((args.out / "ablation.json").read_text())))
        return
    base = [*SIZES[args.size], *QUIET]
    medians = step_seconds(base, args)
    planned = [(seed, name) for seed in range(args.seeds) for name in args.switches]
    rows, running = [], []
    while planned or running:
        while planned and len(running) < args.jobs:
            seed, name = planned.pop(0)
            steps = int(args.seconds / medians[name])
            run_dir = args.out / name / f"seed{seed}"
            overrides = [*base, *SWITCHES[name], f"seed={seed}", f"trainer.max_steps={steps}"]
            overrides += [f"trainer.val_check_interval={steps}", f"optimizer.decay_steps={steps}"]
            running.append((seed, name, steps, run_dir, train(overrides, run_dir, args)))
        seed, name, steps, run_dir, proc = running.pop(0)
        result = finish(proc, run_dir)
        rows.append({"switch": name, "seed": seed, "steps": steps, "step_ms": 1000 * medians[name], **result})
        print(f"{name:17s} seed {seed}: val {result['best_val_loss']:.4f} after {steps} steps", flush=True)
    summary = {"args": {**vars(args), "out": str(args.out)}, "step_ms": {k: 1000 * v for k, v in medians.items()}}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "ablation.json").write_text(json.dumps({**summary, "runs": rows}, indent=1))
    if rows:
        print(table({**summary, "runs": rows}))


if __name__ == "__main__":
    main()
