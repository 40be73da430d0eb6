"""A DDP rank whose peer dies ends in one line naming the lost rank, its checkpoint kept.

Issue 37 item 6: `kill -9` of either rank of `trainer=ddp_cpu trainer.devices=2` left the survivor
in a 100-line gloo traceback ("Connection reset by peer").
"""

import re

import pytest

from src.training.checkpoint import read_checkpoint
from tests.helpers import run_cli, tiny_training


@pytest.mark.slow  # two processes under gloo
@pytest.mark.parametrize("rank_0_delayed", [0, 8])
def test_the_survivor_of_a_killed_rank_names_it_and_keeps_the_checkpoint(tmp_path, rank_0_delayed):
    """Issue 48: under load, rank 0 did not hear from gloo within the 5 s after which Lightning's watch of its
    child processes SIGKILLs it: exit 137 and no line (rank 0 delayed 8 s here, as a loaded machine does)."""
    run = tmp_path / "run"
    kill_rank_1 = ["+callbacks.signal._target_=tests.helpers.SignalRankAt", "+callbacks.signal.rank=1"]
    kill_rank_1 += ["+callbacks.signal.step=3", "+callbacks.signal.signal_name=SIGKILL"]
    kill_rank_1 += ["+callbacks.sleep._target_=tests.helpers.SleepRankAt", "+callbacks.sleep.rank=0"]
    kill_rank_1 += ["+callbacks.sleep.step=3", f"+callbacks.sleep.seconds={rank_0_delayed}"]
    args = ["trainer.max_steps=20", "trainer.val_check_interval=2", "sample.max_new_tokens=0", *kill_rank_1]
    result = run_cli(
        "train", *tiny_training(tmp_path, "trainer=ddp_cpu", "model.num_layers=1", *args, f"hydra.run.dir={run}")
    )
    assert result.returncode == 1, result.stderr[-3000:]
    last = run / "checkpoints" / "last.ckpt"
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:") or "Traceback" in line]
    assert len(lines) == 1, result.stderr[-3000:]
    assert re.fullmatch(
        rf"error: rank 1 of 2 ended at step 3 \(its process is gone: (Connection (closed|reset) by peer|killed by "
        rf"SIGKILL)\): the "
        rf"newest checkpoint, {re.escape(str(last))}, is intact; resume with: python -m src.train "
        rf"ckpt_path={re.escape(str(run))}",
        lines[0],
    ), lines[0]
    assert read_checkpoint(last)["global_step"] == 2
