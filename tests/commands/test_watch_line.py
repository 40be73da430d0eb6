"""The run's last line names the folder TensorBoard must open (issue 36, item 11)."""

from __future__ import annotations

import pytest

from tests.helpers import run_main, tiny_training


@pytest.mark.slow
def test_a_run_put_outside_the_log_dir_is_watched_where_it_is(tmp_path):
    log_dir, elsewhere = tmp_path / "outputs", tmp_path / "elsewhere" / "run"
    overrides = tiny_training(log_dir, f"hydra.run.dir={elsewhere}", "trainer.max_steps=4", "sample.max_new_tokens=0")
    result = run_main("train", *overrides, "trainer.val_check_interval=4", "explorer=false")
    assert result.returncode == 0, result.stderr[-2000:]
    watch = [line for line in result.stdout.splitlines() if line.startswith("watch it: ")]
    assert len(watch) == 1 and f"tensorboard --logdir {elsewhere}, then open " in watch[0]  # not {log_dir}
    assert watch[0].split(", then open ")[1].startswith("http://localhost:6006/?smoothing=0 ")
    assert list((elsewhere / "tensorboard").glob("events.out.tfevents.*"))
