"""`python -m src.generate num_samples=N`: one batch, printed as nanoGPT prints samples."""

import pytest

from tests.helpers import run_main

pytestmark = pytest.mark.slow  # reads the session's tiny run (make test-fast skips it)

PROMPT = "To be"


def test_num_samples_prints_each_sample_and_sample_i_is_seed_plus_i_alone(trained):
    run_dir, _ = trained
    args = [f"ckpt_path={run_dir}", f"prompt='{PROMPT}'", "max_new_tokens=40", "temperature=1.0"]
    batch = run_main("generate", *args, "num_samples=3", "seed=1")
    assert batch.returncode == 0, batch.stderr
    *samples, tail = batch.stdout.split("---------------\n")
    assert tail == "" and len(samples) == 3
    assert all(s.startswith(PROMPT) and len(s) == len(PROMPT) + 40 + 1 for s in samples)  # + the newline
    assert len(set(samples)) == 3
    alone = run_main("generate", *args, "num_samples=1", "seed=3")
    assert alone.returncode == 0, alone.stderr
    assert alone.stdout == samples[2]  # no dashes after a single sample


def test_num_samples_below_one_is_refused(trained):
    run_dir, _ = trained
    result = run_main("generate", f"ckpt_path={run_dir}", "num_samples=0")
    assert result.returncode == 2 and result.stderr.startswith("error: num_samples must be a positive integer, got 0")
