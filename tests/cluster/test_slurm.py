"""SLURM for real: a one-node cluster on this machine (scripts/slurm.sh, the `slurm` fixture), real
sbatch and srun, DDP over gloo on its CPUs. What tests/run/ proves by setting SLURM's variables around the
code, proven here against slurmctld and slurmd: the submitit launcher's sweep, srun's ranks, pre-emption
and requeue, the time limit, a lost task, and a request no node can hold."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from src.training.checkpoint import read_checkpoint
from tests.helpers import ROOT, run_cli, run_main, scalars, tiny_training

pytestmark = pytest.mark.slow  # each starts jobs on the cluster (and the first, the cluster)

QUIET = ["sample.max_new_tokens=0", "callbacks.sample_text=null", "callbacks.attention_maps=null", "explorer=false"]
TINY = ["model.num_layers=1", *QUIET]


def job(job_id: str) -> dict[str, str]:
    """What slurmctld knows of a job (`scontrol show job`): JobState, Restarts, ExitCode, ..."""
    shown = subprocess.run(["scontrol", "-o", "show", "job", job_id], capture_output=True, text=True, check=True)
    return dict(re.findall(r"(\w+)=(\S*)", shown.stdout))


def wait_for(what: str, done: Callable[[], Any], timeout: float, every: float = 0.2) -> Any:
    """Polls done() until it returns something true, failing with `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = done()
        if found:
            return found
        time.sleep(every)
    raise AssertionError(f"{what}: not after {timeout:.0f} s")


FINISHED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "BOOT_FAIL"}


def wait_finished(job_id: str, timeout: float) -> dict[str, str]:
    """The job once SLURM says it ended (not while it is only completing, or requeued)."""
    return wait_for(f"SLURM job {job_id} to end", lambda: (j := job(job_id))["JobState"] in FINISHED and j, timeout)


def sbatch(folder: Path, lines: list[str], *options: str) -> str:
    """Submits a batch script (its output in folder/job.out, appended to across requeues); its job id."""
    script = folder / "job.sh"
    head = [f"#SBATCH --output={folder / 'job.out'}", "#SBATCH --open-mode=append", *(f"#SBATCH {o}" for o in options)]
    script.write_text("\n".join(["#!/bin/bash", *head, "set -e", *lines]) + "\n")
    submitted = subprocess.run(
        ["sbatch", "--parsable", f"--chdir={ROOT}", str(script)], capture_output=True, text=True, check=True
    )
    return submitted.stdout.strip().split(";")[0]


def train_lines(log_dir: Path, *extra: str) -> str:
    """`srun python -m src.train ...` of a tiny run, for a batch script."""
    args = tiny_training(log_dir, *TINY, *extra)
    return f"srun {sys.executable} -m src.train " + " ".join(f"'{a}'" for a in args)


def errors(text: str) -> list[str]:
    """The run's error lines. srun writes its "slurmstepd-...: error: *** STEP ... CANCELLED ... ***" notice
    between the bytes it relays from the task, so the notice can land inside one of the run's lines."""
    text = re.sub(r"slurmstepd\S*: error: \*\*\* .*? \*\*\*\n?", "", text)
    return [line for line in text.splitlines() if line.startswith("error:") or "Traceback" in line]


def test_a_sweep_through_the_slurm_launcher_runs_each_point_as_a_two_task_ddp_job(tmp_path, slurm):
    """No GPU, core or memory typed: the preset asks a CPU trainer's jobs for what they need."""
    sweep = tmp_path / "sweep"
    args = ["-m", "hydra/launcher=slurm", f"hydra.sweep.dir={sweep}"]
    args += tiny_training(tmp_path, "trainer=ddp_cpu", "trainer.devices=2", *TINY, "trainer.max_steps=4")
    result = run_cli("train", *args, "trainer.val_check_interval=4", "model.embedding_dim=32,48", timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    records = [json.loads((sweep / str(n) / "result.json").read_text()) for n in (0, 1)]
    assert [r["status"] for r in records] == ["ok", "ok"] and [r["steps"] for r in records] == [4, 4]
    assert records[0]["parameters"] < records[1]["parameters"]  # each job ran its own point
    for n, point in enumerate(("embedding_dim=32", "embedding_dim=48")):  # a TensorBoard run per point, named after it
        assert len(list((sweep / str(n) / "tensorboard" / point).glob("events.out.tfevents.*"))) == 1
        assert [s for s, _ in scalars(sweep / str(n), f"tensorboard/{point}")["loss/val"]] == [0, 4]
        assert (sweep / str(n) / "train_rank_1.log").is_file()  # rank 1 of the job's 2 tasks
    assert sorted(p.name for p in sweep.iterdir() if p.name.isdigit()) == ["0", "1"]
    table = [line for line in (sweep / "summary.md").read_text().splitlines() if re.match(r"\| [01] \|", line)]
    assert len(table) == 2 and all(line.rstrip().endswith("| ok |") for line in table)
    (submitted,) = {p.read_text() for p in sweep.glob(".submitit/*/*_submission.sh")}  # one array job
    asked = dict(re.findall(r"#SBATCH --([\w-]+)=(\S+)", submitted))
    assert (asked["ntasks-per-node"], asked["cpus-per-task"], asked["mem"]) == ("2", "1", "4GB"), asked
    assert "gpus-per-node" not in asked or asked["gpus-per-node"] == "0", asked
    assert "\nexport OMP_NUM_THREADS=1\n" in submitted  # each rank's threads: its one core, not the node's


@pytest.mark.parametrize(
    "asked, line",
    [
        (
            ["hydra.launcher.mem_gb=100000"],
            r"error: hydra\.launcher\.mem_gb=100000: the largest node of partition "
            r"debug has \d+ GB: set hydra\.launcher\.mem_gb to at most \d+",
        ),
        (
            ["trainer.devices=64"],
            r"error: hydra\.launcher\.cpus_per_task=1: 64 tasks per node \(trainer\.devices\) "
            r"x 1 cores = 64, but the largest node of partition debug has \d+ cores: .*",
        ),
        (
            ["hydra.launcher.partition=gpu"],
            r"error: hydra\.launcher\.partition=gpu: SLURM has no such partition "
            r"\(sinfo lists: debug\): set one of them",
        ),
        (
            ["+hydra.launcher.additional_parameters.constraint=nope"],
            r"error: hydra/launcher=slurm: sbatch refused the job \(sbatch: error: Batch job submission failed: "
            r"Invalid feature specification\): change the hydra\.launcher setting it is about",
        ),
    ],
)
def test_a_job_no_node_can_hold_is_refused_in_one_line_naming_the_setting(tmp_path, slurm, asked, line):
    """sbatch itself refuses the memory ("Memory specification can not be satisfied", a submitit traceback),
    and takes more cores than any node has, the job then pending forever (squeue: PartitionConfig); what
    sbatch refuses past these checks ends in its own words (the line sbatch printed itself stays above)."""

    def jobs() -> set[str]:
        return set(subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True).stdout.split())

    before = jobs()
    args = tiny_training(tmp_path, "trainer=ddp_cpu", "trainer.devices=2", *TINY, *asked)
    result = run_main("train", "-m", "hydra/launcher=slurm", f"hydra.sweep.dir={tmp_path / 'sweep'}", *args)
    assert result.returncode == 2 and re.fullmatch(line, "\n".join(errors(result.stderr))), result.stderr[-3000:]
    assert jobs() <= before  # nothing submitted
    if "sbatch refused" not in line:  # refused before submitit wrote its submission
        assert not list(tmp_path.rglob(".submitit"))


def test_srun_of_two_ranks_in_an_sbatch_job_trains_as_one_process_with_their_global_batch(tmp_path, slurm):
    run = ["data.sampling=epoch", "trainer.max_steps=8", "trainer.val_check_interval=8"]
    single = run_main("train", *tiny_training(tmp_path / "single", *TINY, *run, "data.batch_size=16"))
    assert single.returncode == 0, single.stderr[-3000:]
    (single_result,) = (tmp_path / "single").glob("*/*/result.json")

    log_dir = tmp_path / "ranks"
    line = train_lines(log_dir, "trainer=ddp_cpu", "trainer.devices=2", *run)
    job_id = sbatch(tmp_path, [line], "--ntasks-per-node=2", "--cpus-per-task=1", "--mem=4G")
    ended = wait_finished(job_id, 300)
    output = (tmp_path / "job.out").read_text()
    assert ended["JobState"] == "COMPLETED", output[-3000:]
    run_dir = log_dir / "slurm" / f"{job_id}.0"  # srun's ranks share one run directory: <job>.<step>
    assert list(log_dir.rglob("result.json")) == [run_dir / "result.json"]
    assert (run_dir / "train_rank_1.log").is_file()
    assert len(list((run_dir / "tensorboard").glob("events.out.tfevents.*"))) == 1
    ours, theirs = json.loads((run_dir / "result.json").read_text()), json.loads(single_result.read_text())
    assert ours["steps"] == theirs["steps"] == 8
    assert ours["best_val_loss"] == pytest.approx(theirs["best_val_loss"], abs=1e-4)


def paused_at(step: int, folder: Path) -> list[str]:
    """The run pauses as `step` ends (tests.helpers.PauseAt) until a stop signal reaches it or folder/go exists."""
    return [
        "+callbacks.pause._target_=tests.helpers.PauseAt",
        f"+callbacks.pause.step={step}",
        f"+callbacks.pause.folder={folder}",
    ]


def reference_run(log_dir: Path, *run: str) -> Path:
    """The same run uninterrupted, in this process: its run directory."""
    done = run_main("train", *tiny_training(log_dir, *TINY, *run))
    assert done.returncode == 0, done.stderr[-3000:]
    (result,) = log_dir.glob("*/*/result.json")
    return result.parent


def train_losses(run_dir: Path) -> dict[int, float]:
    return dict(scalars(run_dir)["loss/train"])


def test_a_preempted_job_saves_between_steps_requeues_itself_and_resumes_to_the_uninterrupted_losses(tmp_path, slurm):
    """`scancel --signal=USR1` reaches the job's task as SLURM's pre-emption notice does (`--signal=USR1@90`)."""
    run = ["trainer.max_steps=8", "trainer.val_check_interval=4"]
    reference = reference_run(tmp_path / "reference", *run)
    log_dir = tmp_path / "outputs"
    line = train_lines(log_dir, *run, *paused_at(3, tmp_path))
    job_id = sbatch(tmp_path, [line], "--requeue", "--ntasks-per-node=1", "--cpus-per-task=1", "--mem=2G")
    wait_for("the run paused at step 3", (tmp_path / "rank0.pid").is_file, 300)
    subprocess.run(["scancel", "--signal=USR1", job_id], check=True)
    ended = wait_finished(job_id, 300)
    output = (tmp_path / "job.out").read_text()
    assert (ended["JobState"], ended["Restarts"]) == ("COMPLETED", "1"), output[-3000:]  # requeued once, by the run
    (result,) = log_dir.glob("*/*/result.json")  # one run, resumed in place
    run_dir = result.parent
    last = run_dir / "checkpoints" / "last.ckpt"
    lines = errors(output)
    assert len(lines) == 1, output[-5000:]
    said = lines[0]
    stopped = re.fullmatch(
        rf"error: SIGUSR1 at step (\d): saved {re.escape(str(last))}; requeued SLURM job {job_id}: it resumes from "
        rf"there when it starts again \(as python -m src.train ckpt_path={re.escape(str(run_dir.absolute()))}\)",
        said,
    )
    assert stopped and int(stopped.group(1)) in (3, 4), said  # between two steps, as the pause ends
    assert f"SLURM requeued job {job_id}: resuming its run {run_dir}" in output
    assert f"resuming from {last}" in output.split(said, 1)[1]  # the attempt SLURM started again
    record, theirs = json.loads(result.read_text()), json.loads((reference / "result.json").read_text())
    assert record["steps"] == 8
    assert record["best_val_loss"] == theirs["best_val_loss"]  # exact resume: the uninterrupted run's numbers
    assert train_losses(run_dir) == train_losses(reference)
    assert not list(run_dir.rglob("hpc_ckpt*"))  # Lightning's own pre-emption file
    assert read_checkpoint(last)["global_step"] == 8


def test_a_time_limit_reached_saves_between_steps_in_one_line_and_the_run_resumes(tmp_path, slurm):
    """The limit shortened under the running job (`scontrol update TimeLimit=1`, a minute, SLURM's unit):
    at the limit SLURM sends the tasks SIGTERM, then SIGKILL after KillWait (5 s on this cluster)."""
    run = ["trainer.max_steps=8", "trainer.val_check_interval=4"]
    log_dir = tmp_path / "outputs"
    line = train_lines(log_dir, *run, *paused_at(3, tmp_path))
    job_id = sbatch(tmp_path, [line], "--ntasks-per-node=1", "--cpus-per-task=1", "--mem=2G")
    wait_for("the run paused at step 3", (tmp_path / "rank0.pid").is_file, 300)
    subprocess.run(["scontrol", "update", f"JobId={job_id}", "TimeLimit=1"], check=True)
    ended = wait_finished(job_id, 300)  # a minute, and slurmctld checks limits every 30 s
    output = (tmp_path / "job.out").read_text()
    assert (ended["JobState"], ended["Reason"]) == ("TIMEOUT", "TimeLimit"), output[-3000:]
    (run_dir,) = (p.parent for p in log_dir.glob("*/*/.hydra"))
    last = run_dir / "checkpoints" / "last.ckpt"
    lines = errors(output)
    assert len(lines) == 1, output[-5000:]
    said = lines[0]
    assert re.fullmatch(
        rf"error: SIGTERM at step \d: saved {re.escape(str(last))}.*ckpt_path={re.escape(str(run_dir))}.*", said
    ), said
    saved_at = read_checkpoint(last)["global_step"]
    assert saved_at in (3, 4) and f"at step {saved_at}:" in said
    resumed = run_main("train", f"ckpt_path={run_dir}")  # the command the line gives
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert json.loads((run_dir / "result.json").read_text())["steps"] == 8


def test_a_task_killed_ends_the_other_in_one_line_and_the_job_with_it(tmp_path, slurm):
    run = ["trainer.max_steps=20", "trainer.val_check_interval=2", "trainer.log_every_n_steps=1"]
    log_dir = tmp_path / "outputs"
    line = train_lines(log_dir, "trainer=ddp_cpu", "trainer.devices=2", *run, *paused_at(3, tmp_path))
    job_id = sbatch(tmp_path, [line], "--ntasks-per-node=2", "--cpus-per-task=1", "--mem=4G")
    pids = wait_for(
        "both ranks paused at step 3",
        lambda: sorted(tmp_path.glob("rank*.pid")) if len(list(tmp_path.glob("rank*.pid"))) == 2 else None,
        300,
    )
    os.kill(int(pids[1].read_text()), signal.SIGKILL)  # rank 1's process, as the OOM killer would
    (tmp_path / "go").touch()
    started = time.monotonic()
    ended = wait_finished(job_id, 120)
    took = time.monotonic() - started
    output = (tmp_path / "job.out").read_text()
    assert ended["JobState"] == "FAILED", output[-3000:]
    run_dir = log_dir / "slurm" / f"{job_id}.0"
    last = run_dir / "checkpoints" / "last.ckpt"
    lines = errors(output)
    assert len(lines) == 1, output[-5000:]
    said = lines[0]
    assert re.fullmatch(
        rf"error: rank 1 of 2 ended at step [34] \(its process is gone: [\w ]+\): the newest checkpoint, "
        rf"{re.escape(str(last))}, is intact; resume with: python -m src.train ckpt_path={re.escape(str(run_dir))}",
        said,
    ), said
    assert read_checkpoint(last)["global_step"] == 2 and took < 60, took
