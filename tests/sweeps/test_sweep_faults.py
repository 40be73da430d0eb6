"""A sweep through its faults: Ctrl-C, SIGTERM and kill -9 under both launchers at random moments,
then a rerun that finishes it, on the real sweep command."""

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from src.training.checkpoint import load_trained, read_checkpoint
from tests.helpers import ROOT, run_main, tiny_training

pytestmark = pytest.mark.slow  # a sweep through its faults: processes, signalled and killed

# A random moment of each fault, from a seed printed with every failure; CI draws none (a fixed moment).
FAULT_SEED = int(os.environ.get("SCRATCHGPT_FAULT_SEED") or (0 if os.environ.get("CI") else random.randrange(2**31)))


# Enough steps that every run's faults land while jobs train (each run trains a second or two), few enough
# that the rerun which finishes the sweep is short: it trains what is left of every job.
SWEEP_STEPS = 100


# Runs of one sweep, each launcher in turn (a job is the same job under either), each with its faults at
# random moments; then a run without a fault must finish the sweep.
FAULTS = [
    ("basic", ("SIGINT",)),
    ("parallel", ("kill worker", "SIGTERM")),
    ("basic", ("SIGTERM",)),
    ("parallel", ("SIGINT",)),
    ("basic", ("kill main",)),
    ("parallel", ("kill main",)),
]


def proc_stat(pid: int) -> tuple[int, str, int] | None:
    """(parent pid, state, start time) of a live process, or None."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    return int(fields[1]), fields[0], int(fields[19])


def descendants(root: int) -> set[tuple[int, int]]:
    """Every live process below `root`, as (pid, start time), so a reused pid is not mistaken for it."""
    found, todo = set(), [root]
    while todo:
        for children in Path(f"/proc/{todo.pop()}/task").glob("*/children"):
            try:
                pids = [int(pid) for pid in children.read_text().split()]
            except OSError:  # it ended meanwhile
                continue
            for pid in pids:
                stat = proc_stat(pid)
                if stat is not None:
                    found.add((pid, stat[2]))
                    todo.append(pid)
    return found


def alive(process: tuple[int, int]) -> bool:
    stat = proc_stat(process[0])
    return stat is not None and stat[2] == process[1] and stat[1] != "Z"


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_text().replace("\0", " ")
    except OSError:
        return ""


def sweep_state(sweep: Path) -> dict[int, dict]:
    """Each job directory's record, the newest step its last.ckpt holds, and the bytes of both."""
    state = {}
    for job in sorted(p for p in sweep.glob("[0-9]*") if p.is_dir()):
        result, last = job / "result.json", job / "checkpoints" / "last.ckpt"
        state[int(job.name)] = {
            "status": json.loads(result.read_text())["status"] if result.is_file() else None,
            "step": read_checkpoint(last)["global_step"] if last.is_file() else None,
            "bytes": (result.read_bytes() if result.is_file() else b"", last.read_bytes() if last.is_file() else b""),
        }
    return state


class SweepRun:
    """One run of the sweep command, its processes watched as it runs (and once it has ended)."""

    def __init__(self, args: list[str], log: Path):
        self.log = log
        self.out, self.err = open(log.with_suffix(".out"), "w"), open(log.with_suffix(".err"), "w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "src.train", *args],
            cwd=ROOT,
            stdout=self.out,
            stderr=self.err,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            start_new_session=True,  # its own process group, as a terminal's foreground job
        )
        self.seen: set[tuple[int, int]] = set()

    def watch(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and self.proc.poll() is None:
            self.seen |= descendants(self.proc.pid)
            time.sleep(0.1)

    def wait_for(self, text: str, after: int = 0, timeout: float = 180) -> bool:
        """Whether the output shows `text` (past its first `after` characters) before the run ends."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.proc.poll() is None:
            if text in self.log.with_suffix(".out").read_text()[after:]:
                return True
            self.watch(0.1)
        return False

    def output(self) -> str:
        return self.log.with_suffix(".out").read_text()

    def fault(self, fault: str, rng: random.Random) -> bool:
        """Whether the fault reached the run while it ran."""
        if self.proc.poll() is not None:
            return False
        if fault == "SIGINT":  # a terminal's Ctrl-C: the whole foreground process group
            os.killpg(self.proc.pid, signal.SIGINT)
        elif fault == "SIGTERM":
            self.proc.send_signal(signal.SIGTERM)
        elif fault == "kill main":
            self.proc.kill()
        else:
            workers = sorted(p for p, _ in descendants(self.proc.pid) if "popen_loky" in cmdline(p))
            if not workers:
                return False
            os.kill(rng.choice(workers), signal.SIGKILL)
        return True

    def end(self, seed_note: str) -> tuple[int, str, str]:
        status = self.proc.wait(timeout=300)
        self.out.close()
        self.err.close()
        deadline = time.monotonic() + 60  # orphans notice their main process is gone between two steps
        while any(alive(p) for p in self.seen) and time.monotonic() < deadline:
            time.sleep(0.2)
        left = [f"{p} {cmdline(p)[:120]}" for p, t in self.seen if alive((p, t))]
        assert not left, f"{seed_note}: processes of the sweep left alive: {left}"
        return status, self.output(), self.log.with_suffix(".err").read_text()


def test_a_sweep_keeps_every_finished_job_through_its_faults_and_a_rerun_finishes_it(tmp_path):
    """SIGINT (to the process group, as Ctrl-C), SIGTERM and kill -9 of the main process under both
    launchers, and kill -9 of a worker (hydra/launcher=parallel), each at a random moment of a run of one
    sweep: nothing of the sweep is left running, every finished job keeps its result.json and last.ckpt,
    no job loses a step it saved, a stopped run says so in one line; then a run without a fault resumes
    and finishes them."""
    sweep, rng = tmp_path / "sweep", random.Random(FAULT_SEED)
    seed_note = f"SCRATCHGPT_FAULT_SEED={FAULT_SEED}"
    job = ["model.num_layers=1", f"trainer.max_steps={SWEEP_STEPS}", "trainer.val_check_interval=10"]
    job += ["data.val_tokens=512", "callbacks.last_checkpoint.every_n_train_steps=5", "sample.max_new_tokens=0"]
    job += ["callbacks.head_scores=null"]  # not what is tested here: a shorter validation
    args = ["-m", *tiny_training(tmp_path, *job), f"hydra.sweep.dir={sweep}", "seed=1,2,3"]
    parallel = ["hydra/launcher=parallel", "hydra.launcher.n_jobs=2"]
    for number, (launcher, faults) in enumerate(FAULTS):
        before = sweep_state(sweep) if sweep.is_dir() else {}
        run = SweepRun(args + parallel * (launcher == "parallel"), tmp_path / f"run{number}")
        reached, seen = [], 0
        for fault in faults:
            run.wait_for("| val loss", after=seen)  # training is under way: a random moment of it
            seen = len(run.output())
            run.watch(0.7 if os.environ.get("CI") else rng.uniform(0, 1.5))
            reached.append(run.fault(fault, rng) and fault)
        status, out, err = run.end(seed_note)
        note = f"{seed_note}, run {number} ({launcher}: {' then '.join(faults)}): status {status}\n{err[-3000:]}"
        stopped_by = next((f for f in reversed(reached) if f in ("SIGINT", "SIGTERM")), None)
        if "kill main" not in reached:  # a killed main process says nothing; the trackers report what it left
            assert all(line.startswith("error: ") for line in err.splitlines() if line.strip()), note
        if stopped_by is not None:
            assert status == 128 + signal.Signals[stopped_by], note
            last = err.strip().splitlines()[-1]
            assert stopped_by in last and ("rerun the same command" in last or "outside training" in last), note
        elif "kill main" in reached:
            assert status == -signal.SIGKILL, note
        after = sweep_state(sweep)
        for n, job_before in before.items():
            if job_before["status"] == "ok":
                assert after[n]["bytes"] == job_before["bytes"], f"{note}: finished job {n} changed"
            if job_before["step"] is not None:
                assert after[n]["step"] >= job_before["step"], f"{note}: job {n} lost saved steps"
        for n, job_after in after.items():
            if job_after["step"] is not None:  # the newest checkpoint on disk always loads
                load_trained(sweep / str(n) / "checkpoints" / "last.ckpt")
            changed = before.get(n, {}).get("bytes") != job_after["bytes"]
            if job_after["status"] == "failed" and changed:  # only a killed worker fails a job here
                assert "kill worker" in reached and "its worker process was killed by SIGKILL" in err, note

    before = sweep_state(sweep)
    final = run_main("train", *args)  # the rerun that finishes the sweep: main(), in this process
    assert final.returncode == 0, f"{seed_note}\n{final.stderr[-3000:]}"
    after = sweep_state(sweep)
    assert sorted(after) == [0, 1, 2] and all(job["status"] == "ok" for job in after.values()), seed_note
    assert all(job["step"] == SWEEP_STEPS for job in after.values()), seed_note
    for n, job in before.items():
        if job["status"] == "ok":
            assert f"{sweep / str(n)} already finished" in final.stdout and after[n]["bytes"] == job["bytes"]
        elif job["step"] is not None:
            assert f"{sweep / str(n)} was interrupted: resuming it from" in final.stdout, seed_note
