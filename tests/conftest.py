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


def hardware_missing(marker: str) -> str | None:
    """Why a test marked `marker` cannot run on this machine, or None when it can."""
    import torch

    if marker == "gpu" and not torch.cuda.is_available():
        return "needs a CUDA GPU"
    if marker == "multi_gpu" and torch.cuda.device_count() < 2:
        return f"needs 2 CUDA GPUs, torch sees {torch.cuda.device_count()}"
    if marker == "mps" and not torch.backends.mps.is_available():
        return "needs Apple's MPS backend"
    return None


def pytest_collection_modifyitems(config, items) -> None:
    """Tests marked gpu, multi_gpu or mps are skipped only where that hardware is absent."""
    for item in items:
        for marker in ("gpu", "multi_gpu", "mps"):
            reason = item.get_closest_marker(marker) and hardware_missing(marker)
            if reason:
                item.add_marker(pytest.mark.skip(reason=reason))
