"""`python -m benchmarks.train_speed --only data`: a 1 GB text, end to end, beside nanoGPT's prepare.py.

The text is Tiny Shakespeare repeated to --data-gb gigabytes, written into a temporary
directory and deleted afterwards (never committed). Measured, each in its own process as a user
runs it, with the peak resident memory of that process (from the kernel's rusage):
  encode      the first run's encoding into the token cache (src.data.token_cache.open_corpus,
              what `python -m src.train data.path=...` calls): seconds, MB/s, cache size on disk
  train       the second run, the real command `python -m src.train data.path=<the 1 GB text>`
              with the default model: seconds from process start to the end of the first
              training step, and the time of one validation at the default data.val_tokens cap;
              beside it the same command on Tiny Shakespeare (1.1 MB)
  nanoGPT     with --nanogpt, its data/shakespeare_char/prepare.py run unchanged on the same
              file (a copy of the script next to a link to the text): seconds and peak memory
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import lightning as L

ROOT = Path(__file__).resolve().parent.parent
TARGETS = {"encode_mb_per_s": 50, "start_to_first_step_s": 3.0, "train_peak_rss_gb": 1.5, "validation_s": 5.0}


class FirstStepClock(L.Callback):
    """Writes the wall-clock (unix) and CPU time of the end of the first step, and each validation's
    seconds, to `path` (added to the real command). CPU time is what a loaded machine distorts least."""

    def __init__(self, path: str):
        self.path = Path(path)
        self.record: dict[str, Any] = {"first_step_end": None, "first_step_cpu": None, "validation_seconds": []}
        self.validation_start = 0.0

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        if self.record["first_step_end"] is None:
            self.record["first_step_end"] = time.time()
            self.record["first_step_cpu"] = time.process_time()
            self._write()

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.validation_start = time.perf_counter()

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.record["validation_seconds"].append(time.perf_counter() - self.validation_start)
        self._write()

    def _write(self) -> None:
        self.path.write_text(json.dumps(self.record))


def measured(command: list[str], cwd: Path, env: dict[str, str] | None = None) -> dict[str, float]:
    """Run a command to its end: wall seconds and its memory (that process alone), its output's tail.

    peak_rss_gb is the kernel's peak resident set; it counts the pages of the memory-mapped token
    file that the process has touched, which are the page cache's, shared and reclaimable.
    peak_anon_gb is the peak of the memory the process owns (RssAnon, sampled every 50 ms).
    """
    start = time.time()
    proc = subprocess.Popen(
        command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}
    )
    peak_anon = 0
    sampling = True

    def sample() -> None:
        nonlocal peak_anon
        while sampling:
            try:
                status = Path(f"/proc/{proc.pid}/status").read_text()
                peak_anon = max(peak_anon, int(status.split("RssAnon:")[1].split()[0]))
            except (OSError, IndexError, ValueError):
                pass
            time.sleep(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    output = proc.stdout.read().decode(errors="replace") if proc.stdout else ""
    sampling = False
    sampler.join()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.time() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"`{' '.join(command)}` failed (exit {proc.returncode}):\n{output[-3000:]}")
    return {
        "start": start,
        "seconds": wall,
        "peak_rss_gb": usage.ru_maxrss / 2**20,
        "peak_anon_gb": peak_anon / 2**20,
        "output": output[-2000:],
    }


def make_big_text(path: Path, gigabytes: float) -> int:
    """Tiny Shakespeare repeated until the file reaches `gigabytes` GB (10^9 bytes); returns its size."""
    block = (ROOT / "data" / "tinyshakespeare" / "input.txt").read_bytes()
    if not block:
        raise SystemExit("error: data/tinyshakespeare/input.txt is missing: run `python -m src.train` once first")
    target = int(gigabytes * 1e9)
    with open(path, "wb") as f:
        while f.tell() < target:
            f.write(block)
    return path.stat().st_size


def directory_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def run(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    big = workdir / "big.txt"
    size = make_big_text(big, args.data_gb)
    cache = workdir / "cache"
    env = {"PYTHONPATH": str(ROOT), "PROJECT_ROOT": str(ROOT)}
    results: dict[str, Any] = {"text_bytes": size}
    try:
        encode_code = (
            "from pathlib import Path; from src.data.token_cache import open_corpus; "
            f"open_corpus(Path({str(big)!r}), {str(cache)!r})"
        )
        encode = measured([sys.executable, "-c", encode_code], ROOT, env)
        results["encode"] = {
            "seconds": encode["seconds"],
            "mb_per_s": size / 1e6 / encode["seconds"],
            "peak_rss_gb": encode["peak_rss_gb"],
            "peak_anon_gb": encode["peak_anon_gb"],
            "cache_bytes": directory_size(cache / "tokens"),
        }
        print(json.dumps(results["encode"]), flush=True)
        results["train"] = first_steps(workdir, "big", [f"data.path={big}", f"data.cache_dir={cache}"], env)
        print(json.dumps(results["train"]), flush=True)
        tiny = ROOT / "data" / "tinyshakespeare" / "input.txt"
        results["train_tiny"] = first_steps(workdir, "tiny", [f"data.path={tiny}", f"data.cache_dir={cache}"], env)
        print(json.dumps(results["train_tiny"]), flush=True)
        if args.nanogpt:
            results["nanogpt_prepare"] = nanogpt_prepare(args.nanogpt, big, workdir / "nanogpt")
            print(json.dumps(results["nanogpt_prepare"]), flush=True)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
        shutil.rmtree(workdir / "nanogpt", ignore_errors=True)
        big.unlink(missing_ok=True)
    results["targets"] = TARGETS
    return results


def first_steps(workdir: Path, name: str, data: list[str], env: dict[str, str]) -> dict[str, float]:
    """The real training command, 20 steps and one validation: start-up time, validation time, peak RSS."""
    clock = workdir / f"clock-{name}.json"
    train = measured(
        [
            sys.executable,
            "-m",
            "src.train",
            *data,
            f"paths.log_dir={workdir / 'outputs'}",
            f"hydra.run.dir={workdir / f'run-{name}'}",
            "trainer.max_steps=20",
            "trainer.val_check_interval=20",
            "sample.max_new_tokens=0",
            "progress_bar=false",
            "+callbacks.first_step_clock._target_=benchmarks.data_scale.FirstStepClock",
            f"+callbacks.first_step_clock.path={clock}",
        ],
        ROOT,
        env,
    )
    record = json.loads(clock.read_text())
    return {
        "start_to_first_step_s": record["first_step_end"] - train["start"],
        "cpu_to_first_step_s": record["first_step_cpu"],
        "validation_s": record["validation_seconds"][0],
        "peak_rss_gb": train["peak_rss_gb"],
        "peak_anon_gb": train["peak_anon_gb"],
        "wall_s": train["seconds"],
    }


def nanogpt_prepare(nanogpt: Path, big: Path, workdir: Path) -> dict[str, float]:
    """nanoGPT's own prepare.py, unchanged, reading `big` as its input.txt (it writes next to itself)."""
    workdir.mkdir()
    shutil.copy(nanogpt / "data" / "shakespeare_char" / "prepare.py", workdir / "prepare.py")
    (workdir / "input.txt").symlink_to(big)
    (workdir / "requests.py").write_text("")  # prepare.py imports requests only to download a missing input.txt
    result = measured([sys.executable, "prepare.py"], workdir)
    return {
        "seconds": result["seconds"],
        "mb_per_s": big.stat().st_size / 1e6 / result["seconds"],
        "peak_rss_gb": result["peak_rss_gb"],
        "peak_anon_gb": result["peak_anon_gb"],
    }


def table_rows(r: dict[str, Any]) -> list[str]:
    """Rows for the Markdown table of train_speed (ours | nanoGPT | ratio)."""
    gb = r["text_bytes"] / 1e9
    enc, train, tiny, nano = r["encode"], r["train"], r["train_tiny"], r.get("nanogpt_prepare")
    ours_vs_nano = (
        f"{nano['seconds']:.1f} ({nano['mb_per_s']:.0f}; {nano['peak_rss_gb']:.2f}) | "
        f"{nano['seconds'] / enc['seconds']:.1f}x faster, {nano['peak_rss_gb'] / enc['peak_rss_gb']:.0f}x less memory |"
        if nano
        else "n/a | |"
    )
    return [
        f"| {gb:.2f} GB text, first run: encode s (MB/s; peak RSS GB) | {enc['seconds']:.1f} ({enc['mb_per_s']:.0f};"
        f" {enc['peak_rss_gb']:.2f}) | {ours_vs_nano}",
        f"| {gb:.2f} GB text: token cache on disk, GB | {enc['cache_bytes'] / 1e9:.2f} | | |",
        f"| second run, s from process start to first step: {gb:.2f} GB text vs Tiny Shakespeare"
        f" | {train['start_to_first_step_s']:.2f} vs {tiny['start_to_first_step_s']:.2f} | | |",
        f"| second run, CPU s of the process to first step: {gb:.2f} GB text vs Tiny Shakespeare"
        f" | {train['cpu_to_first_step_s']:.2f} vs {tiny['cpu_to_first_step_s']:.2f} | | |",
        f"| training process, peak RSS (of it owned, RssAnon) GB: {gb:.2f} GB text vs Tiny Shakespeare"
        f" | {train['peak_rss_gb']:.2f} ({train['peak_anon_gb']:.2f}) vs {tiny['peak_rss_gb']:.2f}"
        f" ({tiny['peak_anon_gb']:.2f}) | | |",
        f"| one validation at the default data.val_tokens, s: {gb:.2f} GB text vs Tiny Shakespeare"
        f" | {train['validation_s']:.2f} vs {tiny['validation_s']:.2f} | | |",
    ]
