"""A 4-point sweep through hydra/launcher=slurm beside the same sweep through hydra/launcher=parallel,
on this machine, rounds alternating: the wall of each command, from its start to its end.

    make slurm-up                               # the local one-node SLURM (scripts/slurm.sh)
    python -m benchmarks.slurm_sweep --rounds 3

Single-device CPU jobs (trainer=cpu), so that both launchers run them side by side: the parallel
launcher one per core, SLURM as many as the node's cores hold (the preset asks a core and 2 GB each).
What SLURM adds is each job's own interpreter and imports, its scheduling, and submitit's polling
for the results (every second).
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

ROOT = Path(__file__).resolve().parent.parent
GRID = ["model.num_heads=2,4", "model.embedding_dim=32,64"]
COMMON = ["trainer=cpu", "model.num_layers=1", "data.batch_size=12", "trainer.val_check_interval=100"]
COMMON += ["sample.max_new_tokens=0", "callbacks.sample_text=null", "callbacks.attention_maps=null", "explorer=false"]
COMMON += ["progress_bar=false", "sweep.media=false"]
LAUNCHERS = ("slurm", "parallel")


def slurm_conf() -> str:
    """SLURM_CONF of the running local cluster (scripts/slurm.sh up reuses it, or starts it)."""
    up = subprocess.run([str(ROOT / "scripts" / "slurm.sh"), "up"], capture_output=True, text=True, check=False)
    found = re.search(r"^export SLURM_CONF=(\S+)$", up.stdout, re.MULTILINE)
    if up.returncode != 0 or found is None:
        sys.exit(f"error: the local SLURM did not start (scripts/slurm.sh up: {up.stderr.strip()})")
    return found.group(1)


def sweep(launcher: str, sweep_dir: Path, steps: int, env: dict[str, str]) -> float:
    """One sweep's wall, in seconds; fails unless all 4 jobs end ok."""
    command = [sys.executable, "-m", "src.train", "-m", f"hydra/launcher={launcher}", f"hydra.sweep.dir={sweep_dir}"]
    command += [*COMMON, f"trainer.max_steps={steps}", *GRID]
    start = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    statuses = [json.loads(p.read_text())["status"] for p in sorted(sweep_dir.glob("*/result.json"))]
    if done.returncode != 0 or statuses != ["ok"] * 4:
        sys.exit(f"error: the {launcher} sweep failed ({statuses}): {done.stderr[-2000:]}")
    return wall


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.slurm_sweep", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="rounds, each running both sweeps (alternating first)")
    parser.add_argument("--steps", type=int, default=200, help="trainer.max_steps of each job")
    args = parser.parse_args()
    env = {**os.environ, "SLURM_CONF": slurm_conf()}
    walls: dict[str, list[float]] = {launcher: [] for launcher in LAUNCHERS}
    with tempfile.TemporaryDirectory(prefix="slurm-sweep-") as tmp:
        for round_ in range(args.rounds):
            order = LAUNCHERS if round_ % 2 == 0 else LAUNCHERS[::-1]
            for launcher in order:
                walls[launcher].append(sweep(launcher, Path(tmp) / f"{launcher}-{round_}", args.steps, env))
                print(f"round {round_ + 1}: {launcher:8} {walls[launcher][-1]:6.1f} s", flush=True)
    slurm, parallel = (statistics.median(walls[launcher]) for launcher in LAUNCHERS)
    print(
        f"4-point sweep, {args.steps} steps a job, median of {args.rounds}: hydra/launcher=slurm {slurm:.1f} s, "
        f"hydra/launcher=parallel {parallel:.1f} s ({slurm / parallel:.2f}x)"
    )


if __name__ == "__main__":
    main()
