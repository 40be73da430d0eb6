"""Each job of a sweep plans and builds its run once, inside train(): one Trainer per job."""

import pytest

from tests.helpers import counted_training, tiny_training


@pytest.mark.slow  # a process: ~15 s
def test_each_sweep_job_builds_one_trainer(tmp_path):
    result, counts = counted_training(
        tmp_path / "counts.json", "-m", "debug=fast_dev_run", *tiny_training(tmp_path), "seed=1,2"
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert len(list((tmp_path / "multirun").glob("*/*/*/result.json"))) == 2
    assert counts["trainers"] == 2, counts  # one per job
