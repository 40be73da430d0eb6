"""A run is built once (issue 31): one Trainer per run and per sweep job, its config composed once.

Counted in the command's own process (tests.helpers.counted_training wraps Trainer.__init__ and
Hydra's composition): the command line's checks build the run's real parts for its real run
directory and hand them to the task, which does not build them again.
"""

import pytest

from tests.helpers import counted_training, tiny_training


@pytest.mark.slow  # a process: ~10 s
def test_a_fast_dev_run_builds_one_trainer_and_composes_its_config_once(tmp_path):
    run = tmp_path / "run"
    result, counts = counted_training(
        tmp_path / "counts.json", "debug=fast_dev_run", *tiny_training(tmp_path, f"hydra.run.dir={run}")
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "fast_dev_run: val loss" in result.stdout + result.stderr
    assert counts["trainers"] == 1, counts
    assert counts["compositions"] == 1, counts  # issue 31 asked for at most 2; Hydra alone composed twice


@pytest.mark.slow  # a process: ~10 s
def test_a_run_into_a_timestamped_folder_builds_one_trainer(tmp_path):
    """The default run directory (outputs/<date>/<time>, from ${now:...}) is resolved before the run is built."""
    result, counts = counted_training(tmp_path / "counts.json", "debug=fast_dev_run", *tiny_training(tmp_path))
    assert result.returncode == 0, result.stderr[-3000:]
    assert counts["trainers"] == 1 and counts["compositions"] == 1, counts
    (run,) = [p.parent for p in tmp_path.glob("*/*/.hydra")]  # <date>/<time>, as Hydra names it
    assert (run / "train.log").is_file() and "fast_dev_run: val loss" in (run / "train.log").read_text()
