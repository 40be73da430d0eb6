"""One sweep per sweep directory while it lives."""

import os
import signal
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from src.sweeps.summary import SWEEP, start
from src.training import STOP_SIGNALS
from tests.helpers import run_cli


def test_a_second_sweep_into_a_live_sweeps_directory_is_refused_in_one_line(tmp_path, capsys):
    """Issue 37 item 17: of two identical sweeps started 1 s apart, the second said "was interrupted:
    resuming it" about the first's live job, appended to its train.log and rewrote its .hydra/."""
    config = OmegaConf.create({"hydra": {"sweep": {"dir": str(tmp_path)}, "sweeper": {}, "overrides": {"task": []}}})
    handlers = {s: signal.getsignal(s) for s in STOP_SIGNALS}
    try:
        start(config)  # the first sweep, live
        first = SWEEP.lock
        with pytest.raises(SystemExit) as refused:
            start(config)
        assert refused.value.code == 2
        assert capsys.readouterr().err.splitlines() == [
            f"error: another sweep is running in hydra.sweep.dir={tmp_path}: wait for it to end (rerunning the "
            f"same command then resumes what it left), or choose another hydra.sweep.dir"
        ]
        os.close(first)  # the first sweep ends
        start(config)
        os.close(SWEEP.lock)
    finally:
        SWEEP.config = SWEEP.lock = None
        for s, handler in handlers.items():
            signal.signal(s, handler)


@pytest.mark.slow
def test_a_sweep_its_launcher_refuses_leaves_no_folder_behind(tmp_path):
    """The lock is taken as the multirun starts, before Hydra sets up the launcher: a refusal there (no
    sinfo on PATH) left the new sweep directory holding an empty .lock."""
    sweep = tmp_path / "new" / "sweep"
    env = {"PATH": str(Path(sys.executable).parent)}  # the project's python, and no SLURM command
    result = run_cli("train", "-m", "hydra/launcher=slurm", f"hydra.sweep.dir={sweep}", "model.num_heads=2,4", env=env)
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.splitlines()[-1].startswith("error: hydra/launcher=slurm submits to SLURM, but sinfo is not")
    assert list(tmp_path.iterdir()) == [], list(tmp_path.rglob("*"))
