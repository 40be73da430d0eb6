"""`python -m benchmarks.train_speed [--nanogpt PATH] [--only ...]`: how fast we train, sample and attend.

Sections (all by default; --only picks some):
  throughput  steady-state median ms/step and tokens/s of `python -m src.train experiment=nanogpt_cpu`
              (the real command: Lightning, logging, progress bar, validation as configured), and
              with --nanogpt, nanoGPT's documented CPU run of the same model, in alternating rounds
  step        the model's training step alone, in-process: ours eager and compiled, nanoGPT's model
              eager, at the baby and the notes' size (benchmarks/step_compile.py)
  loop        Lightning's loop per step at the notes' scale: a bare loop, Trainer.fit with automatic and
              with manual optimization, 1 and 2 threads (benchmarks/lightning_loop.py)
  budget      what a run pays for beyond the maths at the baby size: ms per step with each callback and
              per-step mechanism taken out in turn and all of them, a loop without Lightning, nanoGPT's
              loop; and the whole 500-step run in parts (start-up, steps, validations, media,
              checkpoints, sample, exit) beside nanoGPT's (benchmarks/budget.py)
  curve       both whole runs of 2000 steps as users run them (ours: `experiment=nanogpt_cpu` with
              its validation, media, checkpoints and final sample): val loss at step 2000, wall time
              from process start to exit, and where it went (benchmarks/whole_run.py)
  speedrun    `experiment=cpu_speedrun`: seconds from process start to the first val loss <= 1.88,
              against nanoGPT's wall time for its whole 2000-step run
  generation  500 new tokens from the default model: the loop before issue 14, the notes' loop and
              today's; a batch of 10 samples; `python -m src.generate` from process start to its
              first token, beside `python -c "import torch"`
  validation  the exact validation pass of the baby model, one forward pass per batch against one
              part of each batch per core (benchmarks/validation_cores.py)
  attention   the plain and fused attention paths: forward + backward time per training step
  logging     ms/step with the default logging against logging switched off
  data        a 1 GB text: encode, cache, start, memory, validation; nanoGPT's prepare.py beside it
              (benchmarks/data_scale.py; --data-gb sets the size)
  sweep       the 12-job sweep at the notes' scale, sequential and parallel, beside a loop of
              nanoGPT runs over the same configurations (benchmarks/sweep_speed.py)

nanoGPT's code is not part of this repository: pass the path to your own checkout (its data
files are written from our copy of Tiny Shakespeare, in its format, if they are missing).
Machine noise is real on small shared machines: every comparison alternates the two sides.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from benchmarks import budget, data_scale, lightning_loop, step_compile, sweep_speed, validation_cores, whole_run
from benchmarks.nanogpt import NANOGPT_ARGS, prepare_nanogpt_data

ROOT = Path(__file__).resolve().parent.parent
SECTIONS = (
    *("throughput", "step", "loop", "budget", "curve", "speedrun", "generation"),
    *("validation", "attention", "logging", "data", "sweep"),
)
TARGET_LOSS = 1.88
WARMUP_STEPS = 20
BATCH = 12
# The two sizes compared step for step: nanoGPT's baby GPT, and the notes' scale (1 layer, 5 heads,
# 60 dims, block 10), where the per-step overhead of the training loop dominates.
SIZES = {
    "baby (4L, 4H, 128d, block 64)": {"n_layer": 4, "n_head": 4, "n_embd": 128, "block_size": 64},
    "notes (1L, 5H, 60d, block 10)": {"n_layer": 1, "n_head": 5, "n_embd": 60, "block_size": 10},
}
OUR_NAMES = {"n_layer": "num_layers", "n_head": "num_heads", "n_embd": "embedding_dim", "block_size": "context_window"}


def median_ms(seconds: list[float]) -> float:
    return statistics.median(seconds[WARMUP_STEPS:]) * 1000


# ---------------------------------------------------------------- our training command


def run_ours(overrides: list[str], workdir: Path, stop_below: float | None = None) -> dict:
    """Run `python -m src.train` with a StepTimer added; return its record and the wall times."""
    timer = workdir / f"timer-{time.time_ns()}.json"
    command = [
        sys.executable,
        "-m",
        "src.train",
        *overrides,
        f"hydra.run.dir={workdir / f'run-{time.time_ns()}'}",
        "+callbacks.step_timer._target_=benchmarks.step_timer.StepTimer",
        f"+callbacks.step_timer.path={timer}",
    ]
    start = time.time()
    proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for line in proc.stdout:
        if stop_below is not None and timer.exists():
            record = json.loads(timer.read_text())
            if any(loss <= stop_below for _, loss, _ in record["validations"]):
                proc.terminate()  # the target is reached: the rest of the run is not measured
                break
        if "error:" in line:
            print(line.rstrip(), file=sys.stderr)
    proc.wait()
    record = json.loads(timer.read_text())
    record["wall_seconds"] = time.time() - start
    record["start"] = start
    return record


# ---------------------------------------------------------------- nanoGPT beside us


def run_nanogpt(nanogpt: Path, iters: int, workdir: Path, size: dict | None = None) -> dict:
    """nanoGPT's train.py; per-iteration times and its evaluations, parsed from its log."""
    prepare_nanogpt_data(nanogpt)
    command = [
        sys.executable,
        "train.py",
        *NANOGPT_ARGS,
        *[f"--{key}={value}" for key, value in (size or {}).items()],
        f"--max_iters={iters}",
        f"--out_dir={workdir / 'nanogpt-out'}",
    ]
    start = time.time()
    proc = subprocess.Popen(command, cwd=nanogpt, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    step_seconds, validations = [], []
    for line in proc.stdout:
        if m := re.match(r"iter (\d+): loss [\d.]+, time ([\d.]+)ms", line):
            step_seconds.append(float(m.group(2)) / 1000)
        elif m := re.match(r"step (\d+): train loss [\d.]+, val loss ([\d.]+)", line):
            validations.append([int(m.group(1)), float(m.group(2)), time.time()])
    proc.wait()
    if proc.returncode != 0:
        raise SystemExit(f"nanoGPT failed (exit {proc.returncode}): run `python train.py` in {nanogpt} to see why")
    return {
        "step_seconds": step_seconds,
        "validations": validations,
        "wall_seconds": time.time() - start,
        "start": start,
    }


# ---------------------------------------------------------------- sections


def throughput(args: argparse.Namespace, workdir: Path) -> dict:
    results = {}
    for label, size in SIZES.items():
        ours_ms, nano_ms = [], []
        overrides = [f"model.{OUR_NAMES[key]}={value}" for key, value in size.items()]
        for r in range(args.rounds):
            if args.nanogpt:
                nano_ms.append(median_ms(run_nanogpt(args.nanogpt, args.steps, workdir, size)["step_seconds"]))
            command = ["experiment=nanogpt_cpu", *overrides, f"trainer.max_steps={args.steps}", "progress_bar=true"]
            ours_ms.append(median_ms(run_ours(command, workdir)["step_seconds"]))
            print(f"  {label} round {r + 1}: ours {ours_ms[-1]:.1f} ms/step", end="")
            print(f", nanoGPT {nano_ms[-1]:.1f}" if nano_ms else "")
        tokens = BATCH * size["block_size"]
        result = {"ours_ms": statistics.median(ours_ms), "ours_rounds": ours_ms}
        result["ours_tokens_per_s"] = tokens / result["ours_ms"] * 1000
        if nano_ms:
            result |= {"nanogpt_ms": statistics.median(nano_ms), "nanogpt_rounds": nano_ms}
            result["nanogpt_tokens_per_s"] = tokens / result["nanogpt_ms"] * 1000
            result["speedup"] = result["nanogpt_ms"] / result["ours_ms"]
        results[label] = result
    return results


def curve(args: argparse.Namespace, workdir: Path) -> dict:
    """Both whole 2000-step runs as users run them, in alternating rounds (benchmarks/whole_run.py)."""
    ours_runs, nano_runs = [], []
    for r in range(args.rounds):
        ours_runs.append(whole_run.ours(workdir, ROOT, []))
        print(f"  round {r + 1}: ours {ours_runs[-1]['wall_s']:.1f} s", end="", flush=True)
        if args.nanogpt:
            prepare_nanogpt_data(args.nanogpt)
            nano_runs.append(whole_run.nanogpt(args.nanogpt, workdir, [*NANOGPT_ARGS, "--max_iters=2000"]))
            print(f", nanoGPT {nano_runs[-1]['wall_s']:.1f} s", end="")
        print()
    result = {"ours": whole_run.median_run(ours_runs)}
    result["ours_val_at_2000"] = statistics.median(result["ours"]["val_losses"])
    result["ours_wall_s"] = result["ours"]["wall_s"]
    if nano_runs:
        result["nanogpt"] = whole_run.median_run(nano_runs)
        result["nanogpt_val_at_2000"] = statistics.median(result["nanogpt"]["val_losses"])
        result["nanogpt_wall_s"] = result["nanogpt"]["wall_s"]
        result["speedup"] = result["nanogpt_wall_s"] / result["ours_wall_s"]
        first = nano_runs[0]["validations"]
        result["nanogpt_seconds_to_target"] = next((t for loss, t in first if loss <= TARGET_LOSS), None)
    return result


def speedrun(args: argparse.Namespace, workdir: Path, nanogpt_wall: float | None) -> dict:
    record = run_ours(["experiment=cpu_speedrun", "sample.max_new_tokens=0"], workdir, stop_below=TARGET_LOSS)
    crossing = next(((s, loss, t) for s, loss, t in record["validations"] if loss <= TARGET_LOSS), None)
    result = {"validations": [(s, round(v, 4), round(t - record["start"], 1)) for s, v, t in record["validations"]]}
    if crossing:
        result |= {"step": crossing[0], "val_loss": crossing[1], "seconds": crossing[2] - record["start"]}
    if nanogpt_wall and crossing:
        result["fraction_of_nanogpt_wall"] = result["seconds"] / nanogpt_wall
    return result


def _default_model(**overrides):
    from omegaconf import OmegaConf

    from src.model import build_model
    from src.run.cli import compose

    config = OmegaConf.to_container(compose("train", []).model, resolve=True) | overrides
    torch.manual_seed(0)
    return build_model(config, vocab_size=65).eval()


BEFORE_ISSUE_14 = "102f3cd"  # the last commit with the generation loop that issue 14 measured


def _sampling_at(revision: str):
    """src/model/generation.py as it was at `revision` (git show), imported beside today's."""
    import importlib.util

    source = subprocess.run(
        ["git", "show", f"{revision}:src/model/generation.py"], cwd=ROOT, capture_output=True, text=True
    )
    if source.returncode != 0:
        return None  # not a git checkout with that history
    path = Path(tempfile.mkdtemp(prefix="sampling-before-")) / "sampling_before.py"
    path.write_text(source.stdout)
    spec = importlib.util.spec_from_file_location("sampling_before", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _checkpoint_of(model, workdir: Path) -> Path:
    """A checkpoint of `model` in the format `python -m src.train` writes (untrained weights: timing only)."""
    from omegaconf import OmegaConf

    from src.run.cli import compose

    vocab = "".join(chr(c) for c in range(32, 32 + 64)) + "\n"
    hparams = {"model": OmegaConf.to_container(compose("train", []).model, resolve=True), "tokenizer": {"vocab": vocab}}
    path = workdir / "generate-bench.ckpt"
    state = {f"model.{k}": v for k, v in model.state_dict().items()}
    torch.save({"hyper_parameters": hparams, "state_dict": state, "global_step": 0}, path)
    return path


def _seconds_to_first_token(command: list[str], prompt_chars: int) -> float:
    """Process start to the first generated character on stdout (the prompt is printed first)."""
    start = time.perf_counter()
    proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    proc.stdout.read(prompt_chars + 1)
    seconds = time.perf_counter() - start
    proc.stdout.read()
    proc.wait()
    return seconds


def generation(args: argparse.Namespace, workdir: Path) -> dict:
    """500 tokens from the default model (window 64): before issue 14, the notes' loop, now; batches; start-up."""
    from src.model import generation as gen

    def tokens_per_s(generate, batch: int = 1, **kwargs) -> float:
        prompt = torch.randint(0, 65, (batch, 6), generator=torch.Generator().manual_seed(0))
        start = time.perf_counter()
        generate(model, prompt, 500, temperature=0.8, generator=torch.Generator().manual_seed(0), **kwargs)
        return batch * 500 / (time.perf_counter() - start)

    def default_threads_only(*a, **k):
        probe = gen.fastest_thread_count
        gen.fastest_thread_count = lambda step, threads: threads  # no probe: torch's default
        try:
            return gen.generate(*a, **k)
        finally:
            gen.fastest_thread_count = probe

    model = _default_model()
    before = _sampling_at(BEFORE_ISSUE_14)
    variants = {
        "now": lambda: tokens_per_s(gen.generate),
        "now, default threads": lambda: tokens_per_s(default_threads_only),
        "notes' loop (use_cache=False)": lambda: tokens_per_s(gen.generate, use_cache=False),
        "now, batch of 10": lambda: tokens_per_s(gen.generate, batch=10),
    }
    if before is not None:
        variants[f"before ({BEFORE_ISSUE_14})"] = lambda: tokens_per_s(before.generate)
    speeds: dict[str, list[float]] = {name: [] for name in variants}
    for r in range(args.rounds):
        for name, measure in variants.items():  # alternating: the machine's load hits all alike
            speeds[name].append(measure())
        print(f"  round {r + 1}: " + ", ".join(f"{n} {v[-1]:,.0f}" for n, v in speeds.items()), flush=True)
    result: dict = {"tokens_per_s": {name: statistics.median(v) for name, v in speeds.items()}, "rounds": speeds}

    checkpoint = _checkpoint_of(model, workdir)
    prompt = "ROMEO:"
    generate_cmd = [sys.executable, "-m", "src.generate", f"ckpt_path={checkpoint}", f"prompt={prompt}", "device=cpu"]
    import_torch = [sys.executable, "-c", "import torch; print('x' * 7, flush=True)"]
    first_token, torch_only = [], []
    for _ in range(args.rounds):
        first_token.append(_seconds_to_first_token(generate_cmd, len(prompt)))
        torch_only.append(_seconds_to_first_token(import_torch, len(prompt)))
    result["first_token_s"] = statistics.median(first_token)
    result["import_torch_s"] = statistics.median(torch_only)
    return result


def attention(args: argparse.Namespace) -> dict:
    from src.model.attention import MultiHeadAttention

    result = {}
    for label, batch, model in [
        ("default (batch 32)", 32, _default_model()),
        ("nanogpt_cpu (batch 12)", 12, _default_model(embedding_dim=128, positional="learned")),
    ]:
        model.train()
        idx = torch.randint(0, 65, (batch, model.context_window))
        times = {False: [], True: []}
        for _ in range(args.rounds * 5):
            for fused in (False, True):
                for module in model.modules():
                    if isinstance(module, MultiHeadAttention):
                        module.fused = fused
                for repeat in range(4):
                    start = time.perf_counter()
                    _, loss = model(idx, idx)
                    loss.backward()
                    if repeat:  # the first is a warm-up after switching paths
                        times[fused].append(time.perf_counter() - start)
                    model.zero_grad(set_to_none=True)
        plain, fused = statistics.median(times[False]) * 1000, statistics.median(times[True]) * 1000
        result[label] = {"plain_ms": plain, "fused_ms": fused, "speedup": plain / fused}
    return result


def logging_overhead(args: argparse.Namespace, workdir: Path) -> dict:
    quiet = [
        "trainer.log_every_n_steps=1000000",
        "callbacks.throughput=null",
        "callbacks.sample_text=null",
        "callbacks.attention_maps=null",
        "callbacks.validation_report=null",
        "progress_bar=false",
    ]
    base = ["experiment=nanogpt_cpu", f"trainer.max_steps={args.steps}", "sample.max_new_tokens=0"]
    logged, silent = [], []
    for _ in range(args.rounds):
        logged.append(median_ms(run_ours([*base, "progress_bar=true"], workdir)["step_seconds"]))
        silent.append(median_ms(run_ours([*base, *quiet], workdir)["step_seconds"]))
    a, b = statistics.median(logged), statistics.median(silent)
    return {"logged_ms": a, "silent_ms": b, "overhead_percent": 100 * (a - b) / b, "rounds": [logged, silent]}


def table(results: dict) -> str:
    """The results as a Markdown table (what BENCHMARKS.md quotes)."""

    def fmt(value: float | None, spec: str) -> str:
        return "n/a" if value is None else format(value, spec)

    rows = ["| measurement | ours | nanoGPT | ratio |", "| --- | --- | --- | --- |"]
    for label, r in results.get("throughput", {}).items():
        rows.append(
            f"| training step, {label}: median ms/step (tokens/s) | {r['ours_ms']:.1f} ({r['ours_tokens_per_s']:,.0f})"
            f" | {fmt(r.get('nanogpt_ms'), '.1f')} ({fmt(r.get('nanogpt_tokens_per_s'), ',.0f')})"
            f" | {fmt(r.get('speedup'), '.2f')}x |"
        )
    if st := results.get("step"):
        rows += step_compile.table_rows(st)
    if lo := results.get("loop"):
        rows += lightning_loop.table_rows(lo)
    if b := results.get("budget"):
        rows += budget.table_rows(b)
    if c := results.get("curve"):
        rows.append(
            f"| baby run, 2000 steps: val loss at step 2000 | {c['ours_val_at_2000']:.3f}"
            f" | {fmt(c.get('nanogpt_val_at_2000'), '.3f')} | |"
        )
        rows += whole_run.table_rows(c)
    if s := results.get("speedrun"):
        nano = results.get("curve", {})
        rows.append(
            f"| seconds from process start to val loss <= {TARGET_LOSS} | {fmt(s.get('seconds'), '.1f')}"
            f" (cpu_speedrun, step {s.get('step')}) | {fmt(nano.get('nanogpt_seconds_to_target'), '.1f')}"
            f" (whole run {fmt(nano.get('nanogpt_wall_s'), '.0f')}) |"
            f" {fmt(s.get('fraction_of_nanogpt_wall'), '.2f')}x of nanoGPT's wall |"
        )
    if g := results.get("generation"):
        speeds = g["tokens_per_s"]
        now = speeds["now"]
        for name, value in speeds.items():
            ratio = "" if name == "now" else f"now is {now / value:.2f}x"
            if "batch" in name:
                ratio = f"{value / now:.2f}x of one sample's"
            rows.append(
                f"| sampling 500 tokens, default model (window 64), {name}: tokens/s | {value:,.0f} | | {ratio} |"
            )
        rows.append(
            f"| `python -m src.generate`: process start to first token, s (`import torch` alone)"
            f" | {g['first_token_s']:.2f} ({g['import_torch_s']:.2f}) | | |"
        )
    if v := results.get("validation"):
        rows += validation_cores.table_rows(v)
    for label, a in results.get("attention", {}).items():
        rows.append(
            f"| forward + backward, {label}: plain vs fused attention ms | {a['plain_ms']:.1f} vs {a['fused_ms']:.1f}"
            f" | | {a['speedup']:.2f}x |"
        )
    if lg := results.get("logging"):
        rows.append(
            f"| baby run ms/step with default logging vs none | {lg['logged_ms']:.1f} vs {lg['silent_ms']:.1f}"
            f" | | {lg['overhead_percent']:+.1f}% |"
        )
    if d := results.get("data"):
        rows += data_scale.table_rows(d)
    if sw := results.get("sweep"):
        rows += sweep_speed.table(sw)
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nanogpt", type=Path, help="path to a nanoGPT checkout, run beside ours")
    parser.add_argument("--only", nargs="+", choices=SECTIONS, default=list(SECTIONS))
    parser.add_argument("--steps", type=int, default=300, help="steps per throughput/logging round")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds per comparison")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument(
        "--budget",
        choices=("all", "steps", "whole", "difference"),
        default="all",
        help="budget: per step, whole run, both, or per step as (600-step run - 100-step run) / 500",
    )
    parser.add_argument(
        "--equal-validation",
        action="store_true",
        help="budget, whole run: also run ours validating as many positions as nanoGPT's evaluation forwards",
    )
    parser.add_argument("--data-gb", type=float, default=1.0, help="size of the text of the data section")
    args = parser.parse_args()
    if args.nanogpt and not (args.nanogpt / "train.py").is_file():
        raise SystemExit(f"error: {args.nanogpt} has no train.py: pass the root of a nanoGPT checkout")
    os.environ.setdefault("PROJECT_ROOT", str(ROOT))
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {os.cpu_count()} CPUs")
    results: dict = {}
    with tempfile.TemporaryDirectory(prefix="scratchgpt-bench-") as tmp:
        workdir = Path(tmp)
        for section in args.only:
            print(f"== {section}", flush=True)
            if section == "throughput":
                results[section] = throughput(args, workdir)
            elif section == "step":
                results[section] = step_compile.run(args)
            elif section == "loop":
                results[section] = lightning_loop.run(args)
            elif section == "budget":
                results[section] = budget.run(args, workdir)
            elif section == "curve":
                results[section] = curve(args, workdir)
            elif section == "speedrun":
                nanogpt_wall = results.get("curve", {}).get("nanogpt_wall_s")
                results[section] = speedrun(args, workdir, nanogpt_wall)
            elif section == "generation":
                results[section] = generation(args, workdir)
            elif section == "validation":
                results[section] = validation_cores.run(args)
            elif section == "attention":
                results[section] = attention(args)
            elif section == "logging":
                results[section] = logging_overhead(args, workdir)
            elif section == "data":
                results[section] = data_scale.run(args, workdir)
            elif section == "sweep":
                results[section] = sweep_speed.sweep(args, workdir)
            print(json.dumps(results[section], indent=2, default=float), flush=True)
    print(table(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2, default=float))


if __name__ == "__main__":
    main()
