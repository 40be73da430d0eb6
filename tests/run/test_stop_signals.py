"""Signals x phases: every signal that stops a run (SIGINT, SIGTERM, SIGHUP, SIGUSR1) takes one path,
sent once or repeated, while the libraries load, between two steps, during a validation or during
the final sample. (A signal's checkpoint resumed to the same losses: test_faults.py; a sweep's
signals: tests/sweeps/; SLURM's, on a real cluster: tests/cluster/test_slurm.py; DDP's: test_scaling.py.)

Issue 37: SIGHUP (a closed terminal) and SIGUSR1 killed the run with nothing saved; three quick
SIGTERMs dropped every step since the last validation and said "SIGTERM outside training".
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from src.training import STOP_SIGNALS, exit_status
from src.training.checkpoint import read_checkpoint
from tests.helpers import ROOT, run_main, tiny_training, train_in_process

NO_MEDIA = ("callbacks.sample_text=null", "callbacks.attention_maps=null", "sample.max_new_tokens=0")


def last_step(run_dir: Path) -> int:
    return read_checkpoint(run_dir / "checkpoints" / "last.ckpt")["global_step"]


QUIET = ("callbacks.sample_text=null", "callbacks.attention_maps=null", "sample.max_new_tokens=0")


@pytest.fixture
def handlers():
    """The test process's own handlers, given back after a run that stopped on a signal keeps its own."""
    before = {s: signal.getsignal(s) for s in STOP_SIGNALS}
    yield
    for s, handler in before.items():
        signal.signal(s, handler)


@pytest.mark.parametrize(
    "sent",
    ["SIGINT", "SIGTERM", "SIGHUP", "SIGUSR1", "SIGTERM,SIGTERM,SIGTERM", "SIGHUP,SIGTERM", "SIGUSR1,SIGUSR1"],
)
def test_a_signal_between_steps_saves_last_ckpt_and_names_the_resume_command(tmp_path, capsys, handlers, sent):
    run = tmp_path / "run"
    with pytest.raises(SystemExit) as stopped:
        train_in_process(
            run,
            "trainer.max_steps=6",
            "trainer.val_check_interval=6",
            "+callbacks.signal._target_=tests.helpers.SignalsAfterStep",
            "+callbacks.signal.step=3",
            f"+callbacks.signal.signal_names='{sent}'",
            *QUIET,
        )
    first = sent.split(",")[0]
    assert stopped.value.code == exit_status(first) == 128 + signal.Signals[first]
    last = run / "checkpoints" / "last.ckpt"
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert lines == [
        f"error: {first} at step 3: saved {last}; resume with: python -m src.train ckpt_path={run}; "
        f"see inside it now: python -m src.explore ckpt_path={run}"
    ]
    assert read_checkpoint(last)["global_step"] == 3
    result = json.loads((run / "result.json").read_text())  # issue 47: it left none
    assert result["status"] == "interrupted" and result["steps"] == 3 and result["best_val_loss"] is None


@pytest.mark.slow
@pytest.mark.parametrize("name", ["SIGINT", "SIGTERM", "SIGHUP", "SIGUSR1"])
def test_a_signal_while_the_libraries_load_is_one_line(tmp_path, name):
    proc = subprocess.Popen(
        [sys.executable, "-m", "src.train", f"paths.log_dir={tmp_path}"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(0.5)  # importing torch, Lightning and Hydra takes seconds
    proc.send_signal(signal.Signals[name])
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == exit_status(name)
    what = "interrupted" if name == "SIGINT" else name
    assert [line for line in stderr.splitlines() if line.strip()] == [
        f"error: {what} outside training (where Ctrl-C saves last.ckpt first): stopped"
    ]


# ---------------------------------------------------------------------------- during a validation, and after training


def signal_at(run: Path, step: int, signal_name: str, times: int = 1) -> subprocess.CompletedProcess:
    """The command's main(), in this process, sent `times` signals by tests.helpers.SignalAt as validation at
    `step` starts (inside fit, where the run's own handler takes them; run_main gives the test's back)."""
    overrides = [
        *tiny_training(run.parent, f"hydra.run.dir={run}", "trainer.max_steps=8", "trainer.val_check_interval=4"),
        *NO_MEDIA,
        "+callbacks.signal._target_=tests.helpers.SignalAt",
        f"+callbacks.signal.step={step}",
        f"+callbacks.signal.signal_name={signal_name}",
        f"+callbacks.signal.times={times}",
    ]
    return run_main("train", *overrides)


@pytest.mark.slow
def test_sigterm_during_the_final_validation_saves_the_last_step_and_exits_143(tmp_path):
    run = tmp_path / "run"
    result = signal_at(run, 8, "SIGTERM")
    assert result.returncode == 143, result.stderr[-2000:]
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines == [  # not "resume with": there is nothing left to train, a resume would be refused
        f"error: SIGTERM at step 8: saved {run / 'checkpoints' / 'last.ckpt'}; training had ended, its result "
        f"is in {run / 'result.json'}; the sample after it was skipped"
    ]
    assert last_step(run) == 8 and json.loads((run / "result.json").read_text())["steps"] == 8


@pytest.mark.slow
def test_two_sigints_during_a_validation_stop_at_once_with_one_line(tmp_path):
    run = tmp_path / "run"
    result = signal_at(run, 8, "SIGINT", times=2)
    assert result.returncode == 130, result.stderr[-2000:]
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: second SIGINT at step 8: stopped at once"), lines
    assert last_step(run) == 4  # the checkpoint of the validation before is intact


@pytest.mark.slow
def test_two_sigints_before_any_checkpoint_do_not_promise_one(tmp_path):
    """Issue 25: this said "the newest checkpoint on disk is intact; resume with: ..." with none on disk."""
    run = tmp_path / "run"
    result = signal_at(run, 4, "SIGINT", times=2)
    assert result.returncode == 130, result.stderr[-2000:]
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines == [
        "error: second SIGINT at step 4: stopped at once without saving; no checkpoint was written yet: "
        "run the command again to start over"
    ]
    assert not (run / "checkpoints" / "last.ckpt").exists()


@pytest.mark.slow
def test_sigterm_during_the_final_sample_stops_it_with_one_line(tmp_path):
    """Issue 25: Lightning's handler, put back after fit, only logged "Received SIGTERM" and the
    sample went on to exit 0. Training is over and saved: the command stops at once."""
    run = tmp_path / "run"
    args = tiny_training(tmp_path, f"hydra.run.dir={run}", "sample.max_new_tokens=200000", *NO_MEDIA[:2])
    proc = subprocess.Popen(  # a process: after training, the command's own handler ends it (os._exit)
        [sys.executable, "-m", "src.train", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    for line in proc.stdout:  # the line before the sample
        if line.startswith("best val loss"):
            break
    time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 143, stderr[-2000:]
    assert [line for line in stderr.splitlines() if line.strip()] == [
        "error: SIGTERM outside training (where Ctrl-C saves last.ckpt first): stopped"
    ]
    assert last_step(run) == 40
