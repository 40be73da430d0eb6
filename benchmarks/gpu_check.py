"""`make gpu-check` (`python -m benchmarks.gpu_check [--nanogpt PATH] [--budget S]`): everything that needs a GPU.

This project is developed on a CPU machine; what needs CUDA is proven there only by simulation
(docs/scaling.md). On the day a GPU machine is at hand, this one command runs, in order:

  environment   python, torch, Lightning, CUDA, every GPU's name and memory
  marked tests  `pytest -m "gpu or multi_gpu"`: each test's name and outcome
  presets       tiny runs of trainer=gpu (bf16 autocast, head scores at each validation), trainer=ddp,
                compile=true, every model switch on at once (with Muon), the other switches, the
                seed model, and experiment=nanogpt_gpu (500 steps; with --nanogpt, nanoGPT's
                train.py at the same config beside it, and the ratio of their times per step)
  commands      generate and evaluate on the GPU (and on cuda:1 with two GPUs)
  sweep         with two or more GPUs: a parallel sweep of jobs of uneven length, and the GPU each job used

and writes one report, outputs/gpu-check/<time>/report.md (its path is the last line printed).
It stops starting steps once --budget seconds (default 420) have passed, so that it fits a lease of
8 minutes on one H200; a step it had no time for says so in the report. The whole CPU suite is
`make test`'s, not this. Without a CUDA GPU it stops at once with one line.
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NANOGPT_STEPS = 500
# Small enough for seconds per preset, large enough to keep a GPU busy.
TINY = [
    "model.num_layers=2",
    "model.embedding_dim=128",
    "model.num_heads=4",
    "model.context_window=64",
    "trainer.max_steps=200",
    "trainer.val_check_interval=100",
    "data.val_tokens=20000",
    "progress_bar=false",
]
# Every switch of the model and its optimizer that a preset does not already turn on, in two runs
# (some exclude each other: rope has no learned table, swiglu has its own MLP shape).
MODERN = [
    "model.positional=rope",
    "model.norm=rms",
    "model.qk_norm=true",
    "model.num_kv_heads=2",
    "model.logit_softcap=30",
    "model.smeared_keys=true",
    "model.attention_window=32",
    "model.activation=swiglu",
    "model.value_embeddings=true",
    "optimizer=muon",
]
OTHERS = [
    "model.positional=learned",
    "model.activation=relu2",
    "model.tie_weights=false",
    "model.bias=true",
    "model.norm_gain=false",
    "model.dropout=0.1",
    "model.fused=false",
    "optimizer=sgd",
]
# Jobs that end at different times, so a job freeing its GPU early shows where the next one goes.
SWEEP = ["-m", "hydra/launcher=parallel", "trainer=gpu", "trainer.max_steps=60,240,120,30,180,90"]


@dataclass
class Step:
    """One command of the check; `run` fills in what happened."""

    section: str
    name: str
    command: list[str]
    cwd: Path = ROOT
    timeout: float = 180
    returncode: int | None = None
    seconds: float = 0.0
    output: str = ""
    notes: list[str] = field(default_factory=list)
    run_dir: Path | None = None  # a training's run directory, read back after it ends


def train(name: str, run_dir: Path, *overrides: str, section: str = "presets") -> Step:
    command = [sys.executable, "-m", "src.train", *overrides, f"hydra.run.dir={run_dir}"]
    return Step(section, name, command, run_dir=run_dir)


def plan(work: Path, gpus: int, nanogpt: Path | None) -> list[Step]:
    """The commands, in order; tests compose each training command on a CPU machine."""
    py = sys.executable
    steps = [
        Step(
            "marked tests",
            "pytest -m 'gpu or multi_gpu'",
            [py, "-m", "pytest", "-p", "no:xdist", "-m", "gpu or multi_gpu", "-rA", "-v"],
        ),
        train("trainer=gpu", work / "gpu", "trainer=gpu", *TINY),
        train("trainer=ddp", work / "ddp", "trainer=ddp", *TINY),
        train("trainer=gpu compile=true", work / "compile", "trainer=gpu", "compile=true", *TINY),
        train("every modern switch, Muon", work / "modern", "trainer=gpu", *TINY, *MODERN),
        train("the other switches, SGD", work / "others", "trainer=gpu", *TINY, *OTHERS),
        train("model=seed", work / "seed", "trainer=gpu", "model=seed", *TINY[1:]),
        train(
            f"experiment=nanogpt_gpu, {NANOGPT_STEPS} steps",
            work / "nanogpt_gpu",
            "experiment=nanogpt_gpu",
            f"trainer.max_steps={NANOGPT_STEPS}",
            "progress_bar=false",
        ),
    ]
    if nanogpt is not None:
        steps.append(
            Step(
                "presets",
                f"nanoGPT train.py, {NANOGPT_STEPS} steps",
                [
                    py,
                    "train.py",
                    "config/train_shakespeare_char.py",
                    f"--max_iters={NANOGPT_STEPS}",
                    f"--lr_decay_iters={NANOGPT_STEPS}",
                    "--eval_interval=250",
                    "--compile=False",
                    f"--out_dir={work / 'nanogpt-out'}",
                ],
                cwd=nanogpt,
            )
        )
    checkpoint = work / "gpu" / "checkpoints" / "last.ckpt"
    devices = ["cuda", *(["cuda:1"] if gpus > 1 else [])]
    for device in devices:
        steps.append(
            Step(
                "commands",
                f"generate device={device}",
                [py, "-m", "src.generate", f"ckpt_path={checkpoint}", f"device={device}", "max_new_tokens=200"],
            )
        )
        steps.append(
            Step(
                "commands",
                f"evaluate device={device}",
                [py, "-m", "src.evaluate", f"ckpt_path={checkpoint}", f"device={device}"],
            )
        )
    if gpus > 1:
        tiny = [o for o in TINY if not o.startswith("trainer.max_steps=")]
        sweep = [*SWEEP, *tiny, f"hydra.sweep.dir={work / 'sweep'}"]
        steps.append(Step("sweep", "parallel sweep, uneven jobs", [py, "-m", "src.train", *sweep]))
    return steps


def run(step: Step, seconds_left: float) -> None:
    """Runs one step, for at most its own timeout or what is left of the budget."""
    start, timeout = time.time(), min(step.timeout, seconds_left)
    try:
        done = subprocess.run(step.command, cwd=step.cwd, capture_output=True, text=True, timeout=timeout)
        step.returncode, step.output = done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired as err:
        step.returncode, step.output = (
            124,
            f"timed out after {timeout:.0f} s\n{err.stdout or ''}{err.stderr or ''}",
        )
    step.seconds = time.time() - start


def read_back(step: Step, work: Path) -> None:
    """What each kind of step left behind: val losses, the GPU of each sweep job, test outcomes."""
    text = step.output if isinstance(step.output, str) else ""
    for line in text.splitlines():
        if re.match(r"(PASSED|FAILED|SKIPPED|ERROR) ", line) or re.match(r"^(val|test) ", line):
            step.notes.append(line.strip())
        elif m := re.search(r"(best val loss [\d.]+|step \d+: train loss [\d.]+, val loss [\d.]+)", line):
            step.notes.append(m.group(1))
    result_file = step.run_dir / "result.json" if step.run_dir else None
    if result_file and result_file.is_file():
        result = json.loads(result_file.read_text())
        step.notes.append(
            f"{result.get('steps')} steps in {result.get('wall_seconds', 0):.1f} s, "
            f"{result.get('tokens_per_sec', 0):,.0f} tokens/s, best val {result.get('best_val_loss')}"
        )
        if result.get("heads"):
            step.notes.append(f"head scores: {json.dumps(result['heads'])[:300]}")
    if step.section == "sweep":
        for job in sorted((work / "sweep").glob("[0-9]*"), key=lambda p: int(p.name)):
            log = (job / "train.log").read_text() if (job / "train.log").is_file() else ""
            gpu = re.search(r"GPU (\d+)", log)
            result = json.loads((job / "result.json").read_text()) if (job / "result.json").is_file() else {}
            step.notes.append(
                f"job {job.name}: {result.get('steps')} steps, GPU {gpu.group(1) if gpu else '?'}, "
                f"{result.get('wall_seconds', 0):.0f} s, {result.get('status', 'missing')}"
            )


def environment() -> list[str]:
    import lightning
    import torch

    lines = [
        f"date: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}",
        f"python {platform.python_version()}, torch {torch.__version__} (CUDA {torch.version.cuda}), "
        f"lightning {lightning.__version__}",
    ]
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        lines.append(f"GPU {i}: {p.name}, {p.total_memory / 2**30:.1f} GiB, compute capability {p.major}.{p.minor}")
    return lines


def report(steps: list[Step], env: list[str], total: float) -> str:
    parts = ["# make gpu-check", "", *[f"- {line}" for line in env], "", f"whole check: {total:.0f} s", ""]
    parts += ["| section | step | exit | seconds |", "|---|---|---|---|"]
    parts += [f"| {s.section} | {s.name} | {s.returncode} | {s.seconds:.0f} |" for s in steps]
    for s in steps:
        parts += ["", f"## {s.section}: {s.name}", "", "`" + " ".join(map(str, s.command)) + "`", ""]
        parts += [f"- {note}" for note in s.notes]
        if s.returncode not in (0, None):
            parts += ["", "```", *s.output.splitlines()[-40:], "```"]
    return "\n".join(parts) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--nanogpt", type=Path, help="a checkout of nanoGPT, run beside experiment=nanogpt_gpu")
    parser.add_argument("--budget", type=float, default=420, help="seconds after which no further step starts")
    args = parser.parse_args()
    import torch

    if not torch.cuda.is_available():
        print(
            f"error: make gpu-check needs a CUDA GPU, and torch {torch.__version__} sees none here: run it on a "
            f"GPU machine with a CUDA build of torch (make TORCH=torch gpu-check); `make test` is the CPU check",
            file=sys.stderr,
        )
        sys.exit(2)
    if args.nanogpt is not None:
        from benchmarks.nanogpt import prepare_nanogpt_data

        prepare_nanogpt_data(args.nanogpt)
    work = ROOT / "outputs" / "gpu-check" / time.strftime("%Y-%m-%d_%H-%M-%S")
    work.mkdir(parents=True)
    env, start = environment(), time.time()
    steps = plan(work, torch.cuda.device_count(), args.nanogpt)
    for step in steps:
        seconds_left = args.budget - (time.time() - start)
        if seconds_left < 20:
            step.notes.append(f"not run: the budget of {args.budget:.0f} s was spent")
            continue
        print(f"{step.section}: {step.name} ...", flush=True)
        run(step, seconds_left)
        read_back(step, work)
        print(f"  exit {step.returncode} in {step.seconds:.0f} s", flush=True)
        if step.name.startswith("nanoGPT") and step.returncode == 0:
            ours = next(s for s in steps if s.name.startswith("experiment=nanogpt_gpu"))
            step.notes.append(f"ours / nanoGPT, seconds per step (whole processes): {ours.seconds / step.seconds:.2f}")
        (work / "report.md").write_text(report(steps, env, time.time() - start))  # a partial report survives a kill
    print(work / "report.md")
    sys.exit(0 if all(s.returncode == 0 for s in steps) else 1)  # a step not run fails the check


if __name__ == "__main__":
    main()
