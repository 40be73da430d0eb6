"""A run is built once (issue 31): one Trainer per run and per sweep job.

Counted in the command's main(), in this process (Lightning's public Trainer class, wrapped): the
command line's checks build the run's real parts for its real run directory and hand them to the
task, which does not build them again; a sweep's job builds its own, once. (How often Hydra composes
a config is Hydra's business: issue 43 dropped that count, which wrapped Hydra's private loader.)
"""

import functools

import lightning.pytorch as pl
import pytest

from tests.helpers import run_main, tiny_training


@pytest.fixture
def trainers(monkeypatch) -> list[int]:
    """One entry per Trainer constructed while the test runs."""
    built: list[int] = []
    original = pl.Trainer.__init__

    @functools.wraps(original)  # the same signature and hints: the Trainer's schema is read from them
    def counted(self, *args, **kwargs):
        built.append(1)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(pl.Trainer, "__init__", counted)
    return built


@pytest.mark.slow
def test_a_fast_dev_run_builds_one_trainer(tmp_path, trainers):
    run = tmp_path / "run"
    result = run_main("train", "debug=fast_dev_run", *tiny_training(tmp_path, f"hydra.run.dir={run}"))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "fast_dev_run: val loss" in result.stdout + result.stderr
    assert len(trainers) == 1


@pytest.mark.slow
def test_a_run_into_a_timestamped_folder_builds_one_trainer(tmp_path, trainers):
    """The default run directory (outputs/<date>/<time>, from ${now:...}) is resolved before the run is built."""
    result = run_main("train", "debug=fast_dev_run", *tiny_training(tmp_path))
    assert result.returncode == 0, result.stderr[-3000:]
    assert len(trainers) == 1
    (run,) = [p.parent for p in tmp_path.glob("*/*/.hydra")]  # <date>/<time>, as Hydra names it
    assert (run / "train.log").is_file() and "fast_dev_run: val loss" in (run / "train.log").read_text()


@pytest.mark.slow
def test_each_sweep_job_builds_one_trainer(tmp_path, trainers):
    result = run_main("train", "-m", "debug=fast_dev_run", *tiny_training(tmp_path), "seed=1,2")
    assert result.returncode == 0, result.stderr[-3000:]
    assert len(list((tmp_path / "multirun").glob("*/*/*/result.json"))) == 2
    assert len(trainers) == 2  # one per job
