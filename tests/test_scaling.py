"""Scaling out (README, "Scaling out"): GPUs, DDP, torchrun, SLURM, proven here by simulation.

This machine has no GPU: devices are simulated by patching what torch reports, launchers by
their environment variables in a subprocess, several nodes by torchrun agents on localhost over
gloo. Tests marked gpu, multi_gpu or mps run where that hardware is (`make gpu-check`).
"""

from __future__ import annotations

import os
import subprocess
import sys

from benchmarks import gpu_check
from src.cli import compose, sweep_points
from src.config import check_values
from tests.helpers import ROOT


def test_gpu_check_stops_with_one_line_without_a_gpu(tmp_path):
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.gpu_check"], cwd=ROOT, capture_output=True, text=True, env=env
    )
    lines = done.stderr.splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert lines[0].startswith("error: make gpu-check needs a CUDA GPU") and "make test" in lines[0]
    assert not (ROOT / "outputs" / "gpu-check").exists() or not any((ROOT / "outputs" / "gpu-check").iterdir())


def test_every_training_command_of_gpu_check_composes_and_passes_the_value_checks(tmp_path):
    """Composed only: the GPU presets cannot run here, but each is a config the CLI accepts."""
    steps = gpu_check.plan(tmp_path, gpus=2, nanogpt=tmp_path)
    trainings = [s for s in steps if s.command[1:3] == ["-m", "src.train"]]
    assert [s.name for s in trainings][:4] == [
        "trainer=gpu",
        "trainer=ddp",
        "trainer=gpu compile=true",
        f"experiment=nanogpt_gpu, {gpu_check.NANOGPT_STEPS} steps",
    ]
    points = 0
    for step in trainings:
        overrides = [a for a in step.command[3:] if a != "-m" and not a.startswith("hydra.")]
        for point in sweep_points(overrides):
            cfg = compose("train", point)
            check_values(cfg)
            assert cfg.trainer.accelerator == "gpu"
            points += 1
    assert points == 4 + 6  # four presets, six sweep jobs of uneven length
    assert [s.name for s in steps if s.section == "commands"] == [
        "generate device=cuda",
        "evaluate device=cuda",
        "generate device=cuda:1",
        "evaluate device=cuda:1",
    ]
    assert any(s.cwd == tmp_path and "train.py" in s.command for s in steps)  # nanoGPT beside ours
    assert steps[-1].name == "the whole suite"
