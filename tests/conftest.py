"""Fixtures of every folder. Lightning and Hydra are imported inside the fixtures that use them, so
that tests/model/ runs without either."""

import os
import subprocess
from pathlib import Path

import pytest
import torch
from hypothesis import settings

# No deadline on any property test: an example's time measures the machine (a loaded 2-core CI
# box took 254 ms for one that takes 20 quiet), and speed lives in the benchmarks, not in tests.
settings.register_profile("scratchgpt", deadline=None)
settings.load_profile("scratchgpt")


@pytest.fixture(params=["seed", "gpt"])
def kind(request) -> str:
    return request.param


@pytest.fixture(scope="session")
def trained(tmp_path_factory) -> tuple[Path, str]:
    """One tiny training run that several tests read: its run directory and what it printed.

    `python -m src.train`'s main() in this process (tests/helpers.run_main): what the command writes
    and prints, without a second interpreter importing Lightning (test_train_cli.py runs the process)."""
    from tests.helpers import run_main, tiny_training

    log_dir = tmp_path_factory.mktemp("outputs")
    run_dir = log_dir / "run"
    result = run_main("train", *tiny_training(log_dir, f"hydra.run.dir={run_dir}"))
    assert result.returncode == 0, result.stderr[-3000:]
    return run_dir, result.stdout + result.stderr


@pytest.fixture
def sweep_job(tmp_path, monkeypatch):
    """Compose the train config as job `num` of a multirun (in tmp_path/num), Hydra's current config."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf, open_dict

    from src.run.cli import CONFIG_DIR
    from src.run.config import register
    from tests.helpers import ROOT

    threads = torch.get_num_threads()
    monkeypatch.setenv("PROJECT_ROOT", str(ROOT))  # as the commands set it (src/run/cli.py), whatever ran before

    def make(*overrides: str, num: int = 0, sweep_overrides: list[str] | None = None):
        register("train")  # the schemas the YAML files name
        with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
            cfg = hydra_compose("train", [f"hydra.sweep.dir={tmp_path}", *overrides], return_hydra_config=True)
        with open_dict(cfg):
            cfg.hydra.mode = "MULTIRUN"
            cfg.hydra.job.num = num
            cfg.hydra.overrides.task = list(overrides)
            cfg.hydra.runtime.output_dir = str(tmp_path / str(num))
            cfg.hydra.runtime.cwd = str(ROOT)
        if sweep_overrides is not None:  # the sweep as typed, as Hydra saves it before launching
            OmegaConf.save({"hydra": {"overrides": {"task": sweep_overrides}}}, tmp_path / "multirun.yaml")
        HydraConfig.instance().set_config(cfg)
        return cfg

    yield make
    HydraConfig.instance().cfg = None
    torch.set_num_threads(threads)


def hardware_missing(marker: str) -> str | None:
    """Why a test marked `marker` cannot run on this machine, or None when it can."""
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


def pytest_sessionfinish(session) -> None:
    """The local SLURM cluster this session started (tests/cluster/conftest.py), stopped once every test is
    done: by xdist's controller after its workers, or by the one process without xdist."""
    from tests.cluster.local import SLURM_SCRIPT, SLURM_STARTED

    try:
        started_by = SLURM_STARTED.read_text()
    except OSError:
        return
    if started_by != str(os.getpid()):  # a worker, or a pytest inside a test (a collection probe)
        return
    SLURM_STARTED.unlink()
    subprocess.run([str(SLURM_SCRIPT), "down"], check=False, timeout=60)
