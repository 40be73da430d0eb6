"""Where a whole baby run's wall time goes, ours and nanoGPT's, process start to exit.

Ours: `python -m src.train experiment=nanogpt_cpu` as a user runs it (validation every 250 steps,
TensorBoard media, checkpoints, the final sample), plus PhaseClock, a callback that writes when
each phase began. nanoGPT: its documented CPU command. Both print unbuffered; each printed line
is stamped on arrival. Phases:

  start-up     process start to the first training step (imports, config, data, model), less the
               validation at step 0 (ours: Lightning's sanity check; nanoGPT: its evaluation at 0)
  steps        the training steps
  validation   computing the val loss (ours: exact, every val position; nanoGPT: eval_iters
               batches of train and val)
  media        TensorBoard text sample and attention maps (ours only)
  checkpoints  writing best.ckpt / last.ckpt (nanoGPT: ckpt.pt when val improves)
  sample       after the last step to the final sample printed (ours only)
  explorer     writing explore.html, the page of the trained model (ours only, `explorer=true`)
  exit         the last line printed to the process's exit (shutdown)
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import lightning as L

PHASES = ("start-up", "steps", "validation", "media", "checkpoints", "sample", "explorer", "exit")


class PhaseClock(L.Callback):
    """Writes phases.json: the first step's start, each validation's start, loss and end, the
    next step's start, and the end of training (Unix times). The validation at step 0 is
    Lightning's sanity check over the whole val split (trainer.num_sanity_val_steps=-1), before
    the first step. Lightning runs checkpoint callbacks after all others, so what happens between
    a later validation's end here and the next step is the checkpoint writing."""

    def __init__(self, path: str):
        self.path = Path(path)
        self.t: dict[str, Any] = {"first_step": None, "validations": []}

    def on_train_batch_start(self, trainer: L.Trainer, *args: Any) -> None:
        now = time.time()
        if self.t["first_step"] is None:
            self.t["first_step"] = now
        if self.t["validations"] and self.t["validations"][-1][3] is None:
            self.t["validations"][-1][3] = now

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.t["validations"].append([time.time(), None, None, None])

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.t["validations"][-1][1] = time.time()

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.t["validations"][-1][2] = time.time()

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        now = time.time()
        self.t["train_end"] = now
        if self.t["validations"] and self.t["validations"][-1][3] is None:  # the last validation's checkpoints
            self.t["validations"][-1][3] = now
        self.path.write_text(json.dumps(self.t))


def stamped_lines(command: list[str], cwd: Path) -> tuple[list[tuple[float, str]], float, float, int]:
    """Run `command` unbuffered: its output lines, each with its arrival time; start, end, exit status."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    start = time.time()
    proc = subprocess.Popen(command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    lines = [(time.time(), line) for line in proc.stdout]
    proc.wait()
    return lines, start, time.time(), proc.returncode


def ours(workdir: Path, root: Path, overrides: list[str]) -> dict[str, Any]:
    """One whole run of ours: wall, val loss at the end, seconds per phase."""
    clock = workdir / f"phases-{time.time_ns()}.json"
    run_dir = workdir / f"run-{time.time_ns()}"
    command = [sys.executable, "-m", "src.train", "experiment=nanogpt_cpu", *overrides, f"hydra.run.dir={run_dir}"]
    command += [
        "+callbacks.phase_clock._target_=benchmarks.whole_run.PhaseClock",
        f"+callbacks.phase_clock.path={clock}",
    ]
    lines, start, end, returncode = stamped_lines(command, root)
    if returncode != 0:
        raise SystemExit(f"our run failed (exit {returncode}):\n{''.join(line for _, line in lines[-30:])}")
    t = json.loads(clock.read_text())
    validations = t["validations"]
    before = [v for v in validations if v[0] < t["first_step"]]  # step 0's, before the first step
    during = [v for v in validations if v[0] >= t["first_step"]]
    phases = {
        "start-up": t["first_step"] - start - sum(done - begin for begin, _, done, _ in before),
        "validation": sum(loss - begin for begin, loss, _, _ in validations),
        "media": sum(done - loss for _, loss, done, _ in validations),
        "checkpoints": sum(resumed - done for _, _, done, resumed in during),
        "exit": end - lines[-1][0],
    }
    # The explorer page's line follows the sample's last line; the page is written between them.
    page = next((i for i, (_, line) in enumerate(lines) if line.startswith("see inside it")), None)
    sample_end = lines[page - 1][0] if page else lines[-1][0]
    phases["sample"] = sample_end - t["train_end"]
    phases["explorer"] = lines[page][0] - sample_end if page else 0.0
    phases["steps"] = t["train_end"] - t["first_step"] - sum(resumed - begin for begin, _, _, resumed in during)
    result = json.loads((run_dir / "result.json").read_text())
    return {"wall_s": end - start, "val_loss": result["best_val_loss"], "phases": phases}


def nanogpt(nanogpt_dir: Path, workdir: Path, args: list[str]) -> dict[str, Any]:
    """One whole run of nanoGPT's train.py, phases from the arrival times of its printed lines.

    Per iteration it prints `iter k: ... time X ms`, X covering the whole iteration, an
    evaluation (`step k: ...` when k % eval_interval == 0) and its checkpoint (`saving
    checkpoint` when val improved) included. So: evaluation = `step k` line - previous line;
    checkpoint = from `saving checkpoint` to `iter k`, less that iteration's own step (the median
    step); steps = the rest of the iterations' time.
    """
    command = [sys.executable, "-u", "train.py", *args, f"--out_dir={workdir / f'nanogpt-{time.time_ns()}'}"]
    lines, start, end, returncode = stamped_lines(command, nanogpt_dir)
    if returncode != 0:
        raise SystemExit(f"nanoGPT failed (exit {returncode}): run `python train.py` in {nanogpt_dir}")
    iter_line = re.compile(r"^iter \d+: .*time ([\d.]+)ms")
    iters = [(t, float(m.group(1)) / 1000) for t, line in lines if (m := iter_line.search(line))]
    median_step = statistics.median(s for _, s in iters)
    evaluation = checkpoint = 0.0
    first_eval_start = None
    val_loss, validations = None, []
    for i, (t, line) in enumerate(lines):
        if m := re.match(r"step \d+: train loss [\d.]+, val loss ([\d.]+)", line):
            evaluation += t - lines[i - 1][0]
            first_eval_start = first_eval_start or lines[i - 1][0]
            val_loss = float(m.group(1))
            validations.append((val_loss, t - start))
        elif line.startswith("saving checkpoint"):
            next_iter = next(t2 for t2, l2 in lines[i + 1 :] if l2.startswith("iter "))
            checkpoint += max(0.0, next_iter - t - median_step)
    phases = {
        "start-up": first_eval_start - start,
        "validation": evaluation,
        "media": 0.0,
        "checkpoints": checkpoint,
        "sample": 0.0,
        "explorer": 0.0,
        "exit": end - iters[-1][0],
    }
    phases["steps"] = iters[-1][0] - first_eval_start - evaluation - checkpoint
    return {"wall_s": end - start, "val_loss": val_loss, "phases": phases, "validations": validations}


def median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per phase and for the wall, the median over rounds; the val losses of every round."""
    return {
        "wall_s": statistics.median(r["wall_s"] for r in runs),
        "val_losses": [r["val_loss"] for r in runs],
        "phases": {p: statistics.median(r["phases"][p] for r in runs) for p in PHASES},
        "rounds": runs,
    }


def table_rows(result: dict[str, Any]) -> list[str]:
    ours_run, nano = result["ours"], result.get("nanogpt")
    rows = []
    for phase in (*PHASES, "wall"):
        mine = ours_run["wall_s"] if phase == "wall" else ours_run["phases"][phase]
        theirs = (nano["wall_s"] if phase == "wall" else nano["phases"][phase]) if nano else None
        ratio = f"{theirs / mine:.2f}x" if phase == "wall" and theirs else ""
        shown = "n/a" if theirs is None else f"{theirs:.1f}"
        rows.append(f"| baby run, 2000 steps, whole: {phase}, s | {mine:.1f} | {shown} | {ratio} |")
    return rows
