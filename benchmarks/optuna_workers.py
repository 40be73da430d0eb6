"""Trials per minute of 1, 2 and 3 Optuna workers sharing one study (docs/scaling.md, "Searches across machines").

`python -m benchmarks.optuna_workers [--rounds 2] [--trials 6] [--workers 1,2,3] [--steps 60]` runs, in
alternating rounds (1, 2, 3 workers, then 3, 2, 1), `--trials` identical tiny trials (only the learning
rate drawn) of `python -m src.train hparams_search=optuna` by N worker processes sharing a journal file,
as N machines would share it on a shared folder. Two rates: over the wall (process start to the last
worker's exit, start-up included) and over the trials (the first trial's start to the last one's end,
from the study). On one machine the workers share its cores (each worker's threads: its share of them),
so more workers help only while one worker leaves cores idle.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import optuna

from src.sweeps.search import open_storage

ROOT = Path(__file__).resolve().parent.parent
TRIAL = [  # a tiny run: one layer, 32 wide, no media, no pruning; only the learning rate is drawn
    "model.num_layers=1",
    "model.embedding_dim=32",
    "model.num_heads=2",
    "model.context_window=16",
    "data.batch_size=8",
    "data.val_fraction=0.02",
    "trainer.accelerator=cpu",
    "progress_bar=false",
    "hydra.sweeper.pruner=null",
    "optimizer.lr=tag(log, interval(3e-3, 3e-2))",
]


def one_search(workers: int, trials: int, steps: int) -> tuple[float, float]:
    """(trials per minute over the wall, over the trials) of `workers` processes sharing one study."""
    with tempfile.TemporaryDirectory() as folder:
        journal = str(Path(folder) / "study.log")
        common = ["hparams_search=optuna", f"hydra.sweeper.storage={journal}", f"hydra.sweeper.n_trials={trials}"]
        common += [f"trainer.max_steps={steps}", f"trainer.val_check_interval={steps}", f"paths.log_dir={folder}"]
        # Each worker's threads: its share of this machine's cores, as on N machines each has its own.
        env = {**os.environ, "OMP_NUM_THREADS": str(max(1, (os.cpu_count() or 1) // workers))}
        started = time.perf_counter()
        processes = [
            subprocess.Popen(
                [sys.executable, "-m", "src.train", *common, *TRIAL, f"hydra.sweep.dir={folder}/worker{i}"],
                cwd=ROOT,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )
            for i in range(workers)
        ]
        for process in processes:
            _, err = process.communicate()
            if process.returncode != 0:
                sys.exit(f"a worker failed:\n{err[-2000:]}")
        wall = time.perf_counter() - started
        study = optuna.load_study(study_name="scratchgpt", storage=open_storage(journal, 60, None))
        done = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
        if len(done) != trials:
            sys.exit(f"{len(done)} of {trials} trials completed")
        span = (max(t.datetime_complete for t in done) - min(t.datetime_start for t in done)).total_seconds()
        return trials / wall * 60, trials / span * 60


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--trials", type=int, default=6)
    parser.add_argument("--workers", default="1,2,3", help="worker counts, comma-separated")
    parser.add_argument("--steps", type=int, default=60, help="training steps of each trial")
    args = parser.parse_args()
    counts = [int(n) for n in args.workers.split(",")]
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    rates: dict[int, list[tuple[float, float]]] = {n: [] for n in counts}
    for round_ in range(args.rounds):
        for n in counts if round_ % 2 == 0 else counts[::-1]:  # alternating, so drift favours none
            rates[n].append(one_search(n, args.trials, args.steps))
            print(
                f"round {round_ + 1}, {n} worker(s): {rates[n][-1][0]:.1f} trials/min (wall), "
                f"{rates[n][-1][1]:.1f} (trials)",
                flush=True,
            )
    print(f"\n{args.trials} trials of {args.steps} steps; median of {args.rounds} round(s)")
    print("| workers | trials/min, wall | trials/min, first trial to last |")
    print("| --- | --- | --- |")
    for n in counts:
        wall, span = (statistics.median(r[i] for r in rates[n]) for i in (0, 1))
        print(f"| {n} | {wall:.1f} | {span:.1f} |")


if __name__ == "__main__":
    main()
