"""Signals x phases: every signal that stops a run (SIGINT, SIGTERM, SIGHUP, SIGUSR1) takes one path,
sent once or repeated, while the libraries load, between two steps or during a validation.

Issue 37: SIGHUP (a closed terminal) and SIGUSR1 killed the run with nothing saved; three quick
SIGTERMs dropped every step since the last validation and said "SIGTERM outside training".
"""

import signal
import subprocess
import sys
import time

import pytest

from src.training.checkpoint import read_checkpoint
from src.training.signals import STOP_SIGNALS, exit_status
from tests.helpers import ROOT, train_in_process

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
    assert lines == [f"error: {first} at step 3: saved {last}; resume with: python -m src.train ckpt_path={run}"]
    assert read_checkpoint(last)["global_step"] == 3


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
