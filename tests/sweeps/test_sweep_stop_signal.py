"""A sweep's main process stops on a signal wherever it lands, also inside a finalizer.

Issue 37: SIGTERM 0.05 s after a job's sample landed in Profiler.__del__, where the SystemExit of
the sweep's handler was "ignored": the summary was printed, then the next jobs ran to exit 0.
"""

import subprocess
import sys
import textwrap

import pytest

from tests.helpers import ROOT

SWEEP_STOPPED_IN_A_FINALIZER = textwrap.dedent(
    """
    import os, signal, sys
    from omegaconf import OmegaConf
    from src.sweeps.summary import SWEEP, stop_sweep
    from src.training import STOP_SIGNALS

    SWEEP.config = OmegaConf.create({"hydra": {
        "sweep": {"dir": sys.argv[1]}, "sweeper": {}, "overrides": {"task": []},
        "launcher": {"_target_": "hydra._internal.core_plugins.basic_launcher.BasicLauncher"},
    }})
    for s in STOP_SIGNALS:
        signal.signal(s, stop_sweep)

    class Finalized:
        def __del__(self):
            os.kill(os.getpid(), signal.Signals[sys.argv[2]])
            sum(range(1000))  # the handler runs here, inside __del__

    Finalized()
    print("the sweep went on to its next job", flush=True)
    """
)


@pytest.mark.slow
def test_a_signal_inside_a_finalizer_still_stops_the_sweep(tmp_path):
    for name, status in (("SIGTERM", 143), ("SIGHUP", 129)):
        done = subprocess.run(
            [sys.executable, "-c", SWEEP_STOPPED_IN_A_FINALIZER, str(tmp_path), name],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == status, done.stderr[-2000:]
        assert "went on" not in done.stdout and "Exception ignored" not in done.stderr
        assert [line for line in done.stderr.splitlines() if line.strip()] == [
            f"error: {name} stopped the sweep: 0 of 0 jobs finished; rerun the same command to resume it"
        ]
