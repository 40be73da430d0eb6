"""`python -m benchmarks.train_speed --only budget [--nanogpt PATH] [--rounds N] [--steps N]
[--budget all|steps|whole|difference] [--equal-validation]`: what a run pays for beyond the
model's maths, at nanoGPT's CPU baby config (`experiment=nanogpt_cpu`); --budget picks the
per-step part, the whole-run part, both, or the per-step figure by difference.

Per step: the run exactly as `python -m src.train` builds it (src/train.py's build(): the same
DataModule, model, callbacks, logger and trainer, the progress bar on as on a terminal), fitted
for --steps steps without validation, then again with each callback and each per-step mechanism
taken out in turn, and with all of them out (Lightning's bare fit); beside a loop without
Lightning over the same DataModule and model (forward, backward, clipping, fused AdamW, the
schedule) and beside nanoGPT's own loop. Each variant runs in a process of its own
(`python -m benchmarks.budget <variant> <steps>`), all variants once per round, in turn; a
variant's figure is the median over the steps after the 20th of the wall between two step ends
(nanoGPT: the per-iteration times it prints), and the table gives the median over the rounds.

Whole run: `python -m src.train experiment=nanogpt_cpu trainer.max_steps=500` (validations at
250 and 500, exact; TensorBoard media; checkpoints; the final sample) and nanoGPT's documented CPU
run of 500 iterations, alternating, process start to exit, split into the parts of
benchmarks/whole_run.py. With --equal-validation each round also runs ours validating as many
positions as nanoGPT's evaluation forwards (`data.val_tokens`, EQUAL_VALIDATION), the rest as is:
what the run costs beside nanoGPT's when its validation does the same work.

Per step by difference (issue 26's own measure): the wall of a whole 600-step run less that of a
100-step run, over 500, each side as users run it with no evaluation between (ours still
validates at the end and nanoGPT at iteration 0, in both lengths, so those cancel); the four runs
of a round alternate ours and nanoGPT's, the order flipped every round.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

WARMUP = 20
WHOLE_RUN_STEPS = 500
DIFFERENCE_STEPS = (100, 600)
BABY = ["experiment=nanogpt_cpu", "progress_bar=true", "trainer.limit_val_batches=0"]
# What a run does per step besides the maths, each taken out in turn: the configured callbacks
# (by config name), the two train() adds, the logger, the logging at log steps, the NaN watch.
CALLBACKS = (
    "progress_bar",
    "throughput",
    "validation_report",
    "model_checkpoint",
    "last_checkpoint",
    "sample_text",
    "attention_maps",
)
MECHANISMS = ("GracefulInterrupt", "LogHyperparams", "logger", "step logging", "NaN watch")
VARIANTS = ("the run", *(f"no {c}" for c in (*CALLBACKS, *MECHANISMS)), "none of them", "bare loop")


def nanogpt_eval_positions(args: list[str]) -> int:
    """The positions one nanoGPT evaluation forwards: eval_iters batches from each of train and val."""
    value = dict(a.removeprefix("--").split("=", 1) for a in args if a.startswith("--") and "=" in a)
    return 2 * int(value["eval_iters"]) * int(value["batch_size"]) * int(value["block_size"])


def equal_validation() -> list[str]:
    """Our overrides for a validation of nanoGPT's size: its first N + 1 val characters hold N targets."""
    from benchmarks.nanogpt import NANOGPT_ARGS

    return [f"data.val_tokens={nanogpt_eval_positions(NANOGPT_ARGS) + 1}"]


def step_ms(variant: str, steps: int) -> float:
    """Median ms per step of one variant, in this process."""
    warnings.filterwarnings("ignore")
    import lightning as L
    import torch

    from benchmarks.recipe import run_of
    from src.training.callbacks import is_logging_step
    from src.training.gpt_module import GPTModule
    from src.training.optim import build_optimizer, build_schedule

    class WithoutNaNWatch(GPTModule):
        """GPTModule's training_step less the per-step check for a NaN or infinite loss."""

        def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
            _, loss = self.model(*batch)
            if is_logging_step(self.trainer):
                self.log("train/loss", loss, prog_bar=True)
                self.log("train/lr", self.trainer.optimizers[0].param_groups[0]["lr"])
            return loss

    removed = variant.removeprefix("no ") if variant.startswith("no ") else None
    every = variant == "none of them"
    module_class = WithoutNaNWatch if removed == "NaN watch" or every else GPTModule
    overrides = [*BABY, f"trainer.max_steps={steps}"]
    if removed in CALLBACKS:
        overrides.append(f"callbacks.{removed}=null" if removed != "progress_bar" else "progress_bar=false")
    with tempfile.TemporaryDirectory(prefix="budget-") as out:
        cfg, datamodule, lit, trainer = run_of([*overrides, f"paths.output_dir={out}"], module_class)
        ends: list[float] = []
        if variant == "bare loop":
            optimizer_cfg = {**cfg.optimizer, "decay_steps": steps}
            optimizer = build_optimizer(lit.model, optimizer_cfg)
            schedule = build_schedule(optimizer, optimizer_cfg)
            parameters = list(lit.model.parameters())
            batches = iter(datamodule.train_dataloader())
            for _ in range(steps):
                _, loss = lit.model(*next(batches))
                loss.backward()
                torch.nn.utils.clip_grad_norm_(parameters, cfg.trainer.gradient_clip_val)
                optimizer.step()
                schedule.step()
                optimizer.zero_grad(set_to_none=True)
                ends.append(time.perf_counter())
        else:

            class StepEnds(L.Callback):
                def on_train_batch_end(self, *args: Any) -> None:
                    ends.append(time.perf_counter())

            if removed in MECHANISMS[:2]:
                trainer.callbacks = [c for c in trainer.callbacks if type(c).__name__ != removed]
            if every:
                trainer.callbacks = []
            if removed == "logger" or every:
                trainer.loggers = []
            if removed == "step logging" or every:
                trainer.log_every_n_steps = steps + 1  # no log step in the run
            trainer.callbacks.append(StepEnds())
            trainer.fit(lit, datamodule=datamodule)
    times = [b - a for a, b in zip(ends[WARMUP:], ends[WARMUP + 1 :], strict=False)]
    return statistics.median(times) * 1000


def run(args: Any, workdir: Path) -> dict[str, Any]:
    """Every variant once per round in a process of its own (nanoGPT's loop with --nanogpt), in turn."""
    from benchmarks import nanogpt, whole_run

    if args.budget == "difference":
        if not args.nanogpt:
            raise SystemExit("error: --budget difference compares with nanoGPT: pass --nanogpt PATH")
        return {"per_step_by_difference": per_step_by_difference(args, workdir)}
    names = [*VARIANTS, *(["nanoGPT"] if args.nanogpt else [])] if args.budget in ("all", "steps") else []
    rounds: dict[str, list[float]] = {name: [] for name in names}
    ours_runs, nano_runs, equal_runs = [], [], []
    steps_override = [f"trainer.max_steps={WHOLE_RUN_STEPS}"]
    for r in range(args.rounds):
        for name in names:
            if name == "nanoGPT":
                nanogpt.prepare_nanogpt_data(args.nanogpt)
                seconds = run_nanogpt_steps(args.nanogpt, args.steps, workdir)
                rounds[name].append(statistics.median(seconds[WARMUP:]) * 1000)
            else:
                command = [sys.executable, "-m", "benchmarks.budget", name, str(args.steps)]
                out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
                rounds[name].append(float(out.split()[-1]))
        if names:
            print(f"  round {r + 1} per step: " + ", ".join(f"{n} {v[-1]:.1f}" for n, v in rounds.items()), flush=True)
        if args.budget == "steps":
            continue
        ours_runs.append(whole_run.ours(workdir, nanogpt.ROOT, steps_override))
        print(f"  round {r + 1} whole run: ours {ours_runs[-1]['wall_s']:.1f} s", end="", flush=True)
        if args.equal_validation:
            equal_runs.append(whole_run.ours(workdir, nanogpt.ROOT, [*steps_override, *equal_validation()]))
            print(f", ours validating nanoGPT's tokens {equal_runs[-1]['wall_s']:.1f} s", end="", flush=True)
        if args.nanogpt:
            nanogpt.prepare_nanogpt_data(args.nanogpt)  # --budget whole alone runs no step variant that prepares it
            nano_args = [*nanogpt.NANOGPT_ARGS, f"--max_iters={WHOLE_RUN_STEPS}"]
            nano_runs.append(whole_run.nanogpt(args.nanogpt, workdir, nano_args))
            print(f", nanoGPT {nano_runs[-1]['wall_s']:.1f} s", end="")
        print(flush=True)
    result: dict[str, Any] = {"ms_per_step": {n: statistics.median(v) for n, v in rounds.items()}, "rounds": rounds}
    if ours_runs:
        result["whole_run"] = {"ours": whole_run.median_run(ours_runs)}
    if equal_runs:
        result["whole_run"]["ours_equal_validation"] = whole_run.median_run(equal_runs)
    if nano_runs:
        result["whole_run"]["nanogpt"] = whole_run.median_run(nano_runs)
        result["whole_run"]["ratios"] = [n["wall_s"] / o["wall_s"] for o, n in zip(ours_runs, nano_runs, strict=True)]
        if equal_runs:
            pairs = zip(equal_runs, nano_runs, strict=True)
            result["whole_run"]["ratios_equal_validation"] = [n["wall_s"] / o["wall_s"] for o, n in pairs]
    return result


def per_step_by_difference(args: Any, workdir: Path) -> dict[str, Any]:
    """ms per step as (wall of 600 steps - wall of 100 steps) / 500, ours and nanoGPT's, alternating."""
    from benchmarks import nanogpt, whole_run

    nanogpt.prepare_nanogpt_data(args.nanogpt)
    short, long = DIFFERENCE_STEPS

    def ours(steps: int) -> float:
        overrides = [f"trainer.max_steps={steps}", "trainer.val_check_interval=100000"]
        return whole_run.ours(workdir, nanogpt.ROOT, overrides)["wall_s"]

    def theirs(steps: int) -> float:
        nano_args = [*nanogpt.NANOGPT_ARGS, f"--max_iters={steps}", "--eval_interval=100000"]
        return whole_run.nanogpt(args.nanogpt, workdir, nano_args)["wall_s"]

    rounds: list[dict[str, float]] = []
    for r in range(args.rounds):
        runs = [("ours", ours), ("nanoGPT", theirs)]
        walls: dict[tuple[str, int], float] = {}
        for steps in (short, long):
            for name, run_it in runs if r % 2 == 0 else runs[::-1]:
                walls[name, steps] = run_it(steps)
        ms = {name: (walls[name, long] - walls[name, short]) / (long - short) * 1000 for name, _ in runs}
        rounds.append({**ms, "ratio": ms["nanoGPT"] / ms["ours"]})
        print(
            f"  round {r + 1} per step by difference: ours {ms['ours']:.1f} ms, nanoGPT {ms['nanoGPT']:.1f} ms, "
            f"{rounds[-1]['ratio']:.2f}x",
            flush=True,
        )
    return {"rounds": rounds, "median_ratio": statistics.median(r["ratio"] for r in rounds)}


def run_nanogpt_steps(nanogpt_dir: Path, steps: int, workdir: Path) -> list[float]:
    """nanoGPT's per-iteration seconds, as it prints them, over a run of `steps` iterations."""
    import re

    from benchmarks import nanogpt

    command = [sys.executable, "train.py", *nanogpt.NANOGPT_ARGS, f"--max_iters={steps}"]
    command.append(f"--out_dir={workdir / f'nanogpt-{time.time_ns()}'}")
    out = subprocess.run(command, cwd=nanogpt_dir, capture_output=True, text=True, check=True).stdout
    return [float(m.group(1)) / 1000 for m in re.finditer(r"^iter \d+: loss [\d.]+, time ([\d.]+)ms", out, re.M)]


def table_rows(result: dict[str, Any]) -> list[str]:
    """Per step: each variant's ms (what taking it out saves) beside nanoGPT's; then the whole run's parts."""
    from benchmarks.whole_run import PHASES

    if difference := result.get("per_step_by_difference"):
        cells = ", ".join(f"{r['ours']:.1f}/{r['nanoGPT']:.1f} ms {r['ratio']:.2f}x" for r in difference["rounds"])
        return [
            f"| budget, per step by difference (600 - 100 steps), ours/nanoGPT | {cells} | | "
            f"{difference['median_ratio']:.2f}x (median) |"
        ]
    ms = result["ms_per_step"]
    full, nano = ms.get("the run"), ms.get("nanoGPT")
    rows = []
    for name, value in ms.items():
        if name == "nanoGPT":
            continue
        saved = "" if name == "the run" else f" ({full - value:+.2f} ms against the run)"
        theirs = "n/a" if nano is None else f"{nano:.2f}"
        ratio = "" if nano is None else f"{nano / value:.2f}x"
        rows.append(f"| budget, ms per step, {name}{saved} | {value:.2f} | {theirs} | {ratio} |")
    if "whole_run" not in result:
        return rows
    whole = result["whole_run"]
    ours, other = whole["ours"], whole.get("nanogpt")
    rows += phase_rows(f"baby run of {WHOLE_RUN_STEPS} steps", ours, other, (*PHASES, "wall"), whole["ratios"])
    if equal := whole.get("ours_equal_validation"):
        label = f"baby run of {WHOLE_RUN_STEPS} steps validating nanoGPT's positions"
        rows += phase_rows(label, equal, other, ("validation", "wall"), whole["ratios_equal_validation"])
    return rows


def phase_rows(label: str, ours: dict, other: dict | None, phases: tuple[str, ...], ratios: list[float]) -> list[str]:
    """One table row per phase of a whole run, ours beside nanoGPT's; the wall row carries the ratio."""
    rows = []
    for phase in phases:
        mine = ours["wall_s"] if phase == "wall" else ours["phases"][phase]
        theirs = (other["wall_s"] if phase == "wall" else other["phases"][phase]) if other else None
        shown = "n/a" if theirs is None else f"{theirs:.2f}"
        ratio = f"{statistics.median(ratios):.2f}x (median of the rounds' ratios)" if phase == "wall" and other else ""
        rows.append(f"| budget, {label}: {phase}, s | {mine:.2f} | {shown} | {ratio} |")
    return rows


if __name__ == "__main__":
    print(f"{step_ms(sys.argv[1], int(sys.argv[2])):.4f}")
