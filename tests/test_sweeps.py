"""Multirun sweeps, failures inside a sweep, DDP on the CPU, and the Optuna search."""

import json
import os
import signal
import struct
import subprocess
import sys

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from src.cli import compose
from tests.helpers import ROOT, run_cli, tiny_training

pytestmark = pytest.mark.slow  # the commands as processes, end to end (make test-fast skips them)

FAST = ["model.num_layers=1", "trainer.max_steps=10", "trainer.val_check_interval=10", "sample.max_new_tokens=0"]


def job_dirs(sweep_dir):
    return sorted((p for p in sweep_dir.iterdir() if p.name.isdigit()), key=lambda p: int(p.name))


def test_a_2x2_sweep_gives_four_jobs_a_summary_and_a_plot(tmp_path):
    sweep = tmp_path / "sweep"
    args = tiny_training(tmp_path, *FAST, f"hydra.sweep.dir={sweep}", "callbacks.attention_maps=null")
    result = run_cli("train", "-m", *args, "model.num_heads=2,4", "model.embedding_dim=32,48")  # last wins
    assert result.returncode == 0, result.stderr[-3000:]
    jobs = job_dirs(sweep)
    assert [p.name for p in jobs] == ["0", "1", "2", "3"]
    names = set()
    for job in jobs:
        runs = [p for p in (job / "tensorboard").iterdir() if p.is_dir()]
        assert len(runs) == 1 and list(runs[0].glob("events.out.tfevents.*"))
        names.add(frozenset(runs[0].name.split(",")))  # the order follows the command line
        events = EventAccumulator(str(runs[0]))
        events.Reload()
        assert "loss/val" in events.Tags()["scalars"]
        assert (job / "checkpoints" / "best.ckpt").is_file() and (job / ".hydra" / "config.yaml").is_file()
        assert json.loads((job / "result.json").read_text())["status"] == "ok"
        assert not (job / "explore.html").exists()  # media, like the samples: sweep.media=true keeps them
    assert names == {frozenset({f"num_heads={h}", f"embedding_dim={d}"}) for h in (2, 4) for d in (32, 48)}
    summary = (sweep / "summary.md").read_text()
    assert summary.count("| ok |") == 4
    assert "\n".join(summary.splitlines()[2:]) in result.stdout  # the same table, printed
    png = (sweep / "summary.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", png[16:24])[0] > 0

    again = run_cli("train", "-m", *args, "model.num_heads=2,4", "model.embedding_dim=32,48")
    assert again.returncode == 0
    assert (again.stdout + again.stderr).count("already finished") == 4  # kept, not retrained
    for job in jobs:
        runs = [p for p in (job / "tensorboard").iterdir() if p.is_dir()]
        assert len(list(runs[0].glob("events.out.tfevents.*"))) == 1


def test_an_invalid_point_fails_alone_and_the_parallel_launcher_gives_the_same_sweep(tmp_path):
    losses = {}
    for launcher in ("basic", "parallel"):
        sweep = tmp_path / launcher
        args = tiny_training(tmp_path, *FAST, f"hydra.sweep.dir={sweep}", "model.embedding_dim=32")
        if launcher == "parallel":  # 3 jobs on 2 workers: each takes half the cores
            args += ["hydra/launcher=parallel", "hydra.launcher.n_jobs=2"]
        result = run_cli("train", "-m", *args, "model.num_heads=2,3,4")
        assert result.returncode == 1, result.stderr[-3000:]  # the sweep finished, but not every job did
        errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
        assert errors[0] == (
            "error: job 1 (num_heads=3): embedding_dim (32) must be divisible by num_heads (3): "
            "choose an embedding_dim that is a multiple of num_heads"
        )
        assert "Traceback" not in result.stderr and result.stdout.count("summary: ") == 1  # once, in the parent
        records = [json.loads((job / "result.json").read_text()) for job in job_dirs(sweep)]
        assert [r["status"] for r in records] == ["ok", "failed", "ok"]
        assert [r["run_name"] for r in records] == ["num_heads=2", "num_heads=3", "num_heads=4"]
        assert [p.name for p in (sweep / "0" / "tensorboard").iterdir()] == ["num_heads=2"]
        summary = (sweep / "summary.md").read_text()
        assert summary.count("| ok |") == 2 and "FAILED: embedding_dim (32) must be divisible" in summary
        losses[launcher] = [r.get("best_val_loss") for r in records]
    threads = max(1, len(os.sched_getaffinity(0)) // 2)
    assert result.stdout.count(f"of 2 concurrent jobs, {threads} threads") == 3
    assert losses["parallel"][0] == pytest.approx(losses["basic"][0], abs=1e-5)  # same seed, same run
    assert losses["parallel"][2] == pytest.approx(losses["basic"][2], abs=1e-5)

    again = run_cli("train", "-m", *args, "model.num_heads=2,3,4")
    assert again.returncode == 1 and (again.stdout + again.stderr).count("already finished") == 2


def test_ddp_on_the_cpu_writes_one_run_directory(tmp_path):
    log_dir = tmp_path / "outputs"
    result = run_cli(
        "train", "trainer=ddp_cpu", *tiny_training(log_dir, "trainer.max_steps=20", "sample.max_new_tokens=0")
    )
    assert result.returncode == 0, result.stderr[-3000:]
    (day,) = list(log_dir.iterdir())
    (run,) = list(day.iterdir())  # the second process wrote into the same directory
    assert len(list((run / "tensorboard").glob("events.out.tfevents.*"))) == 1
    assert (run / "checkpoints" / "last.ckpt").is_file()
    events = EventAccumulator(str(run / "tensorboard"))
    events.Reload()
    logged = events.Scalars("loss/val")[-1].value
    evaluated = run_cli("evaluate", f"ckpt_path={run / 'checkpoints' / 'last.ckpt'}")
    row = next(line for line in evaluated.stdout.splitlines() if line.startswith("val "))
    assert abs(float(row.split()[1]) - logged) < 1e-4  # the two ranks' shards add up to the exact loss


def test_optuna_searches_two_trials(tmp_path):
    sweep = tmp_path / "optuna"
    searched = ("model.embedding_dim=", "model.num_heads=", "model.context_window=", "optimizer.lr=")
    args = [a for a in tiny_training(tmp_path, *FAST, f"hydra.sweep.dir={sweep}") if not a.startswith(searched)]
    result = run_cli("train", "hparams_search=optuna", "hydra.sweeper.n_trials=2", *args)
    assert result.returncode == 0, result.stderr[-3000:]
    assert [p.name for p in job_dirs(sweep)] == ["0", "1"]
    best = (sweep / "optimization_results.yaml").read_text()
    assert "best_value" in best and "optimizer.lr" in best
    assert (sweep / "summary.md").read_text().count("| ok |") == 2


def test_the_slurm_launcher_follows_the_trainer():
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    from src.cli import CONFIG_DIR
    from src.config import register

    register("train")  # the schemas the YAML files name
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = hydra_compose(
            "train",
            ["hydra/launcher=slurm", "trainer=ddp", "trainer.devices=4", "trainer.num_nodes=2"],
            return_hydra_config=True,
        )
    launcher = cfg.hydra.launcher
    assert launcher._target_.endswith("SlurmLauncher")
    assert (launcher.nodes, launcher.tasks_per_node, launcher.gpus_per_node) == (2, 4, 4)
    assert compose("train", ["trainer=ddp"]).trainer.strategy == "ddp"


def test_rerunning_an_interrupted_sweep_resumes_its_interrupted_job(tmp_path):
    sweep = tmp_path / "sweep"
    args = [
        "-m",
        *tiny_training(tmp_path, "model.num_layers=1", "trainer.max_steps=40", "trainer.val_check_interval=4"),
        f"hydra.sweep.dir={sweep}",
        "sweep.media=false",
        "model.num_heads=2",
    ]
    proc = subprocess.Popen(
        [sys.executable, "-m", "src.train", *args], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    for line in proc.stdout:
        if "val loss" in line and not line.startswith("step      0"):  # a validation after step 0: last.ckpt exists
            proc.send_signal(signal.SIGINT)
            break
    proc.communicate(timeout=120)
    assert proc.returncode == 130
    stopped = torch.load(sweep / "0" / "checkpoints" / "last.ckpt", weights_only=False)["global_step"]
    assert json.loads((sweep / "0" / "result.json").read_text())["status"] == "running"

    again = run_cli("train", *args)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "was interrupted: resuming it from" in again.stdout + again.stderr
    result = json.loads((sweep / "0" / "result.json").read_text())
    assert result["status"] == "ok" and result["steps"] == 40 and stopped < 40


@pytest.mark.slow
def test_rerunning_another_grid_into_a_sweep_directory_keeps_its_jobs(tmp_path):
    """Issue 25: a second grid into the same hydra.sweep.dir overwrote finished jobs 0 and 1 (a job was
    known by its number). Now a directory holding another job's run is kept and the job refused."""
    sweep = tmp_path / "sweep"
    args = [
        "-m",
        *tiny_training(tmp_path, "model.num_layers=1", "trainer.max_steps=4", "trainer.val_check_interval=4"),
        f"hydra.sweep.dir={sweep}",
    ]
    first = run_cli("train", *args, "seed=1,2")
    assert first.returncode == 0, first.stderr[-3000:]
    kept = [json.loads((sweep / str(n) / "result.json").read_text()) for n in (0, 1)]
    second = run_cli("train", *args, "seed=3,4")
    assert second.returncode == 1  # the summary counts the refused jobs as failed
    assert second.stderr.count("holds another job") == 2 and "Traceback" not in second.stderr
    assert [json.loads((sweep / str(n) / "result.json").read_text()) for n in (0, 1)] == kept
