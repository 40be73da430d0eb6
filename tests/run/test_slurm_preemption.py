"""SLURM's pre-emption notice (SIGUSR1 with SLURM's variables) is the project's stop, not Lightning's.

Issue 37 item 10: Lightning's handler wrote hpc_ckpt_1.ckpt from inside the signal handler, mid-step,
and the requeued job restored it past every resume check. Now last.ckpt is saved between two steps,
the job is requeued (`scontrol requeue`), and the job SLURM starts again resumes through ckpt_path.
"""

import os
import signal

import pytest

from src.run.rundir import continue_run
from src.training import STOP_SIGNALS
from src.training.checkpoint import read_checkpoint
from tests.helpers import train_in_process

SLURM = {
    "SLURM_JOB_ID": "77",
    "SLURM_NTASKS": "1",
    "SLURM_NNODES": "1",
    "SLURM_PROCID": "0",
    "SLURM_LOCALID": "0",
    "SLURM_NODEID": "0",
    "SLURM_JOB_NAME": "train",
    "SLURM_NODELIST": "localhost",
}


@pytest.fixture
def slurm(tmp_path, monkeypatch):
    """SLURM's variables, and an `scontrol` on PATH that notes how it was called."""
    before = {s: signal.getsignal(s) for s in STOP_SIGNALS}
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    scontrol = bin_dir / "scontrol"
    scontrol.write_text(f'#!/bin/sh\necho "$@" >> {tmp_path / "scontrol.calls"}\n')
    scontrol.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    for key, value in SLURM.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("SLURM_RESTART_COUNT", raising=False)
    yield tmp_path / "scontrol.calls"
    for s, handler in before.items():
        signal.signal(s, handler)


def test_preemption_saves_last_ckpt_between_steps_requeues_and_the_requeued_job_resumes(
    tmp_path, capsys, slurm, monkeypatch
):
    log_dir = tmp_path / "outputs"
    run = log_dir / "run"
    with pytest.raises(SystemExit) as stopped:
        train_in_process(
            run,
            "trainer.max_steps=6",
            "trainer.val_check_interval=6",
            "+callbacks.signal._target_=tests.helpers.SignalsAfterStep",
            "+callbacks.signal.step=3",
            "+callbacks.signal.signal_names=SIGUSR1",
            "callbacks.sample_text=null",
            "callbacks.attention_maps=null",
        )
    assert stopped.value.code == 138
    last = run / "checkpoints" / "last.ckpt"
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert lines == [
        f"error: SIGUSR1 at step 3: saved {last}; requeued SLURM job 77: it resumes from there when it starts "
        f"again (as python -m src.train ckpt_path={run})"
    ]
    assert read_checkpoint(last)["global_step"] == 3
    assert not list(run.rglob("hpc_ckpt*"))  # Lightning's own pre-emption file
    assert slurm.read_text().split() == ["requeue", "77"]

    typed = [f"paths.log_dir={log_dir}", "model.num_layers=2"]
    assert continue_run(typed) == typed  # not requeued: the command as typed, a new run
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")  # SLURM starts the same command again
    resumed = continue_run(typed)
    assert resumed == [*typed, f"ckpt_path='{run.absolute()}'"]  # resumed through the checks of ckpt_path=
