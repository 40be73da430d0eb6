"""`python -m src.exercises [start|check|train|reset] NAME` (the Makefile: make exercise NAME=attention,
make check-exercise, make train-exercise, make exercise-reset); no arguments lists the exercises."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from src.exercises import EXERCISES, ROOT, VARIABLE, exercise, learner_file, load, write
from src.rules import ConfigError

COMMANDS = ("start", "check", "train", "reset")
LOAD_SECONDS = 30  # the learner's file loading (it defines functions: it takes well under a second)
CHECK_SECONDS = 300  # an exercise's tests: with the reference's code each passes in under 20 s (kv_cache, 2 cores)
# train: the notes' model (model=seed) on the plain path, short enough to compare in about a minute
TRAINING = ("model=seed", "model.fused=false", "trainer.max_steps=500", "trainer.val_check_interval=250")


def shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def listing() -> str:
    lines = ["the exercises (make exercise NAME=<name>; docs/learn.md):"]
    for name, ex in EXERCISES.items():
        status = "started" if learner_file(name).is_file() else ""
        lines.append(f"  {name:<14} {ex.step:<42} {len(ex.tests)} tests  {status}")
    return "\n".join(lines)


def mapped_tests(name: str) -> list[str]:
    """The exercise's tests as pytest node ids: each file found by its basename under tests/."""
    nodes = []
    for test in exercise(name).tests:
        basename, function = test.split("::")
        found = sorted((ROOT / "tests").rglob(basename))
        if len(found) != 1:
            raise ConfigError(f"exercise {name}: tests/**/{basename} found {len(found)} times: the catalogue needs it")
        nodes.append(f"{found[0].relative_to(ROOT)}::{function}")
    return nodes


def start(name: str, again: bool = False) -> int:
    """Write the blank; the learner's file is kept: as it is, or (`again`, make exercise-reset) as .old."""
    path = learner_file(name)
    if path.is_file() and not again:
        print(f"{shown(path)} is there (your work, kept): open it; start again: make exercise-reset NAME={name}")
        return 0
    if path.is_file():
        old = path.with_name(f"{path.name}.old")
        path.replace(old)
        print(f"your version is kept as {shown(old)}")
    write(name)
    step = EXERCISES[name].step
    print(f"wrote {shown(path)}: the notes' step '{step}', its body removed, the formula in its docstring")
    print(f"write it, then: make check-exercise NAME={name}")
    return 0


def started(name: str) -> None:
    if not learner_file(name).is_file():
        raise ConfigError(f"{shown(learner_file(name))} does not exist: start the exercise: make exercise NAME={name}")


def loads(name: str) -> None:
    """The learner's file loaded here first, within LOAD_SECONDS: a syntax error, an error or sys.exit while it
    loads, or an endless loop outside a function is one line, not pytest's INTERNALERROR (or nothing, forever)."""

    def late(signum: int, frame: Any) -> None:
        raise TimeoutError(f"still loading after {LOAD_SECONDS} s: an endless loop outside a function?")

    previous = signal.signal(signal.SIGALRM, late)
    signal.alarm(LOAD_SECONDS)
    try:
        load(name)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def check(name: str) -> int:
    started(name)
    loads(name)
    command = [sys.executable, "-m", "pytest", "-p", "src.exercises.grading", "-o", "addopts="]
    command += ["-p", "no:cacheprovider", "-q", "--tb=short", *mapped_tests(name)]
    try:
        return subprocess.run(command, cwd=ROOT, env={**os.environ, VARIABLE: name}, timeout=CHECK_SECONDS).returncode
    except subprocess.TimeoutExpired:
        raise ConfigError(
            f"exercise {name}: its tests were stopped after {CHECK_SECONDS} s (the reference's code passes them "
            f"in under 20 s): an endless loop in {shown(learner_file(name))}?"
        ) from None


def train(name: str, overrides: list[str]) -> int:
    """Train the same model twice, with the learner's piece and with the reference, and compare."""
    started(name)
    log_dir = next((o.split("=", 1)[1] for o in overrides if o.startswith("paths.log_dir=")), ROOT / "outputs")
    runs = Path(log_dir) / "exercises" / f"{name}_{time.strftime('%Y-%m-%d_%H-%M-%S')}"
    losses = {}
    base = {k: v for k, v in os.environ.items() if k != VARIABLE}
    for who, module in (("yours", "src.exercises.run"), ("reference", "src.train")):  # run: swaps yours in
        env, run_dir = {**base, VARIABLE: name} if who == "yours" else base, runs / who
        command = [sys.executable, "-m", module, *TRAINING, "progress_bar=false", *overrides]
        print(f"training with {'your' if who == 'yours' else 'the reference'} {name}: {shown(run_dir)}", flush=True)
        done = subprocess.run([*command, f"hydra.run.dir={run_dir}"], cwd=ROOT, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            print(done.stdout[-2000:] + done.stderr[-3000:], file=sys.stderr)
            return done.returncode
        losses[who] = json.loads((run_dir / "result.json").read_text())["best_val_loss"]
    difference = abs(losses["yours"] - losses["reference"])
    print(f"best val loss: yours {losses['yours']:.6f}, the reference {losses['reference']:.6f}")
    if difference <= 1e-6:
        print("the same to 1e-6: your code computes what the reference computes")
    else:
        print(f"they differ by {difference:.2e}: your code computes something else (make check-exercise NAME={name})")
    return 0


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in COMMANDS or len(argv) < 2:
        print(listing())
        if argv and argv[0] not in COMMANDS:
            print(f"error: unknown command {argv[0]!r}: use one of {', '.join(COMMANDS)}", file=sys.stderr)
        elif argv:
            print(f"error: {argv[0]} needs an exercise name: make ... NAME=<one of the above>", file=sys.stderr)
        return 2 if argv else 0
    command, name, rest = argv[0], argv[1], argv[2:]
    try:
        exercise(name)
        if command == "train":
            return train(name, rest)
        if rest:
            raise ConfigError(f"{command} takes one exercise name, got also {' '.join(rest)}")
        return check(name) if command == "check" else start(name, again=command == "reset")
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
