from pathlib import Path

import pytest

from tests.helpers import run_cli, tiny_training


@pytest.fixture(params=["seed", "gpt"])
def kind(request) -> str:
    return request.param


@pytest.fixture(scope="session")
def trained(tmp_path_factory) -> tuple[Path, str]:
    """One tiny training run that several tests read: its run directory and what it printed."""
    log_dir = tmp_path_factory.mktemp("outputs")
    run_dir = log_dir / "run"
    result = run_cli("train", *tiny_training(log_dir, f"hydra.run.dir={run_dir}"))
    assert result.returncode == 0, result.stderr[-3000:]
    return run_dir, result.stdout + result.stderr
