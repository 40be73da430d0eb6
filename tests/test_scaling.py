"""Scaling out (README, "Scaling out"): GPUs, DDP, torchrun, SLURM, proven here by simulation.

This machine has no GPU: devices are simulated by patching what torch reports, launchers by
their environment variables in a subprocess, several nodes by torchrun agents on localhost over
gloo. Tests marked gpu, multi_gpu or mps run where that hardware is (`make gpu-check`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hydra.core.hydra_config import HydraConfig

from benchmarks import gpu_check
from src import sweeps
from src.cli import compose, sweep_points
from src.config import check_values
from src.train import main as train_main
from tests.helpers import ROOT, run_cli, tiny_training
from tests.test_bad_input import assert_refused, run_in_process


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


# ---------------------------------------------------------------- 1. a sweep of DDP jobs

DDP_TINY = ["model.num_layers=1", "trainer.max_steps=6", "trainer.val_check_interval=6", "sample.max_new_tokens=0"]


def job_dirs(sweep_dir: Path) -> list[Path]:
    return sorted((p for p in sweep_dir.iterdir() if p.name.isdigit()), key=lambda p: int(p.name))


def test_lightning_starts_a_ddp_jobs_ranks_as_the_job_not_as_the_sweep(sweep_job, monkeypatch, tmp_path):
    """Lightning's own command for rank 1 (its private helper, the one place this project relies on it)."""
    from lightning.fabric.strategies.launchers.subprocess_script import _hydra_subprocess_cmd

    sweep_argv = ["src/train.py", "-m", "trainer=ddp_cpu", "model.num_heads=1,2"]
    monkeypatch.setattr(sys, "argv", list(sweep_argv))
    cfg = sweep_job("trainer=ddp_cpu", "model.num_heads=2", num=1)
    run_dir = HydraConfig.get().run.dir
    with sweeps.ranks_start_as_this_job(cfg):
        command, cwd = _hydra_subprocess_cmd(local_rank=1)
    assert "model.num_heads=1,2" not in command and command.count("-m") <= 1  # `-m module` at most
    assert command[-8:] == [
        "trainer=ddp_cpu",
        "model.num_heads=2",
        "callbacks.sample_text=null",  # the media the job switched off, off on every rank
        "callbacks.attention_maps=null",
        "sample.max_new_tokens=0",
        f'hydra.run.dir="{tmp_path / "1"}"',
        "hydra.job.name=train_ddp_process_1",
        "hydra.output_subdir=null",
    ]
    assert sys.argv == sweep_argv and HydraConfig.get().run.dir == run_dir  # restored after the job


@pytest.mark.parametrize(
    ("launcher", "trainer", "pattern"),
    [
        (
            "parallel",
            ["trainer=ddp_cpu"],
            r"hydra/launcher=parallel runs sweep jobs side by side, but "
            r"trainer.strategy=ddp .*drop hydra/launcher=parallel",
        ),
        (
            "slurm",
            ["trainer=ddp"],
            r"hydra/launcher=slurm asks SLURM for trainer.devices tasks and GPUs per node, "
            r"so it must be a positive integer, got -1",
        ),
        ("slurm", ["trainer=ddp", "trainer.devices=auto"], r"trainer.devices .* got 'auto'"),
        ("slurm", ["trainer=ddp", "trainer.devices=2", "trainer.num_nodes=0"], r"trainer.num_nodes nodes, .* got 0"),
    ],
)
def test_a_launcher_that_cannot_run_the_jobs_trainer_is_refused_up_front(
    tmp_path, monkeypatch, capsys, launcher, trainer, pattern
):
    args = tiny_training(tmp_path, *trainer, f"hydra.sweep.dir={tmp_path / 'sweep'}")
    refused = run_in_process(monkeypatch, capsys, train_main, ["-m", f"hydra/launcher={launcher}", *args])
    assert_refused(refused, pattern)
    assert not (tmp_path / "sweep").exists()


@pytest.mark.slow
def test_a_sweep_of_ddp_jobs_runs_each_job_once_on_two_ranks(tmp_path):
    sweep = tmp_path / "sweep"
    args = tiny_training(tmp_path, "trainer=ddp_cpu", *DDP_TINY, f"hydra.sweep.dir={sweep}")
    result = run_cli("train", "-m", *args, "model.num_heads=1,2")
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    assert output.count("Launching 2 jobs locally") == 1  # the ranks did not start sweeps of their own
    assert [p.name for p in job_dirs(sweep)] == ["0", "1"]
    for job, heads in zip(job_dirs(sweep), (1, 2), strict=True):
        result = json.loads((job / "result.json").read_text())
        assert result["status"] == "ok" and result["steps"] == 6 and f"model.num_heads={heads}" in result["overrides"]
        assert (job / "train_ddp_process_1.log").is_file()  # rank 1 ran in the job's directory, logging apart
    assert not (tmp_path / "multirun").exists() and not list(tmp_path.glob("20*"))  # no stray run directories
    assert (sweep / "summary.md").read_text().count("| ok |") == 2
