"""Scaling out (docs/scaling.md): GPUs, DDP, torchrun, SLURM, proven here by simulation.

This machine has no GPU: devices are simulated by patching what torch reports, launchers by
their environment variables in a subprocess, several nodes by torchrun agents on localhost over
gloo. Tests marked gpu, multi_gpu or mps run where that hardware is (`make gpu-check`).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from hydra.core.hydra_config import HydraConfig

from benchmarks import gpu_check
from src.run.cli import compose
from src.run.points import sweep_points
from src.run.preflight import check_values
from src.run.record import write_result
from src.sweeps import resources as sweep_resources
from src.sweeps.job import MEDIA_OFF, ranks_start_as_this_job, run_job
from src.train import main as train_main
from tests.helpers import (
    ROOT,
    assert_refused,
    free_port,
    hide_gpus,
    run_cli,
    run_in_process,
    run_main,
    tiny_training,
)


def test_gpu_check_stops_with_one_line_without_a_gpu(monkeypatch, capsys):
    hide_gpus(monkeypatch)
    done = run_in_process(monkeypatch, capsys, gpu_check.main, [])
    lines = done.stderr.splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert lines[0].startswith("error: make gpu-check needs a CUDA GPU") and "make test" in lines[0]
    assert not (ROOT / "outputs" / "gpu-check").exists() or not any((ROOT / "outputs" / "gpu-check").iterdir())


def test_every_training_command_of_gpu_check_composes_and_passes_the_value_checks(tmp_path):
    """Composed only: the GPU presets cannot run here, but each is a config the CLI accepts."""
    steps = gpu_check.plan(tmp_path, gpus=2, nanogpt=tmp_path)
    trainings = [s for s in steps if s.command[1:3] == ["-m", "src.train"]]
    assert [s.name for s in trainings][:7] == [
        "trainer=gpu",
        "trainer=ddp",
        "trainer=gpu compile=true",
        "every modern switch, Muon",
        "the other switches, SGD",
        "model=seed",
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
    assert points == 7 + 6  # seven presets, six sweep jobs of uneven length (two GPUs)
    assert [s.name for s in steps if s.section == "commands"] == [
        "generate device=cuda",
        "evaluate device=cuda",
        "generate device=cuda:1",
        "evaluate device=cuda:1",
    ]
    assert any(s.cwd == tmp_path and "train.py" in s.command for s in steps)  # nanoGPT beside ours
    assert not any(s.section == "sweep" for s in gpu_check.plan(tmp_path, gpus=1, nanogpt=None))


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
    with ranks_start_as_this_job(cfg):
        command, cwd = _hydra_subprocess_cmd(local_rank=1)
    assert "model.num_heads=1,2" not in command and command.count("-m") <= 1  # `-m module` at most
    media_off = [f"{k}={json.dumps(v)}" for k, v in MEDIA_OFF.items()]  # off on every rank
    assert "callbacks.sample_text=null" in media_off and "sample.max_new_tokens=0" in media_off
    assert command[-5 - len(media_off) :] == [
        "trainer=ddp_cpu",
        "model.num_heads=2",
        *media_off,
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


# ---------------------------------------------------------------- 3, 4. torchrun and srun ranks

LAUNCHED = {
    "torchrun rank 0": (
        {"TORCHELASTIC_RUN_ID": "r7", "WORLD_SIZE": "2", "RANK": "0"},
        "torchrun/r7",
        ".hydra",
        "train",
    ),
    "torchrun rank 1": (
        {"TORCHELASTIC_RUN_ID": "r7", "WORLD_SIZE": "2", "RANK": "1"},
        "torchrun/r7",
        None,
        "train_rank_1",
    ),
    "srun task 2": (
        {"SLURM_JOB_ID": "41", "SLURM_STEP_ID": "3", "SLURM_NTASKS": "4", "SLURM_PROCID": "2"},
        "slurm/41.3",
        None,
        "train_rank_2",
    ),
    "one srun task": ({"SLURM_JOB_ID": "41", "SLURM_NTASKS": "1", "SLURM_PROCID": "0"}, None, ".hydra", "train"),
    "no launcher": ({}, None, ".hydra", "train"),
}


@pytest.mark.parametrize("case", LAUNCHED)
def test_launched_ranks_share_one_run_directory_and_only_rank_zero_writes_the_runs_files(case, monkeypatch):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    from src.run.cli import CONFIG_DIR
    from src.run.config import register

    env, folder, subdir, log_name = LAUNCHED[case]
    for key in ("TORCHELASTIC_RUN_ID", "WORLD_SIZE", "RANK", "LOCAL_RANK", *(k for k in os.environ if "SLURM" in k)):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    register("train")
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        hydra_cfg = hydra_compose("train", ["paths.log_dir=/runs"], return_hydra_config=True).hydra
    if folder is None:
        assert re.fullmatch(r"/runs/\d{4}-\d\d-\d\d/\d\d-\d\d-\d\d", hydra_cfg.run.dir)
    else:
        assert hydra_cfg.run.dir == f"/runs/{folder}"
    assert (hydra_cfg.output_subdir, hydra_cfg.job.name) == (subdir, log_name)  # <name>.log beside the run


def test_torchrun_without_a_run_id_is_refused_naming_what_works(tmp_path, monkeypatch, capsys):
    for key, value in {"TORCHELASTIC_RUN_ID": "none", "WORLD_SIZE": "2", "RANK": "0"}.items():
        monkeypatch.setenv(key, value)
    refused = run_in_process(monkeypatch, capsys, train_main, tiny_training(tmp_path / "outputs", "trainer=ddp_cpu"))
    assert_refused(refused, r"torchrun started this run without --rdzv-id.*--rdzv-id=<name>.*hydra.run.dir")
    assert not (tmp_path / "outputs").exists()


@pytest.mark.parametrize("before", ["running", "failed"])
@pytest.mark.parametrize("order", [(0, 1), (1, 0)])
def test_every_task_of_a_slurm_job_resumes_alike_and_only_rank_zero_writes_result_json(
    sweep_job, monkeypatch, tmp_path, before, order
):
    cfg = sweep_job("model.num_heads=2")
    job = tmp_path / "0"
    (job / "checkpoints").mkdir(parents=True)
    (job / "checkpoints" / "last.ckpt").write_bytes(b"a checkpoint")
    write_result(job, {"status": before})  # an earlier attempt, interrupted or failed
    for key, value in {"SLURM_JOB_ID": "41", "SLURM_STEP_ID": "0", "SLURM_NTASKS": "2"}.items():
        monkeypatch.setenv(key, value)
    resumed = {}
    for rank in order:
        monkeypatch.setenv("SLURM_PROCID", str(rank))
        written = (job / "result.json").read_text()

        def train(c, rank=rank) -> float:
            resumed[rank] = c.ckpt_path
            return 1.5

        assert run_job(cfg, train) == 1.5
        if rank != 0:
            assert (job / "result.json").read_text() == written  # rank 1 wrote nothing
    expected = str(job / "checkpoints" / "last.ckpt") if before == "running" else None
    assert resumed == {0: expected, 1: expected}  # a rank that read rank 0's record follows its decision
    record = json.loads((job / "result.json").read_text())
    assert record["attempt"] == "slurm/41.0" and record["resumed_from"] == expected


@pytest.mark.slow
def test_two_torchrun_nodes_on_localhost_train_as_one_process_with_their_global_batch(tmp_path):
    """Two torchrun agents (--nnodes=2, one process each, gloo on 127.0.0.1) against one process with
    the same global batch: epoch sampling gives the two ranks' 8 windows the single run's 16."""
    run = ["data.sampling=epoch", "model.num_layers=1", "trainer.max_steps=8", "trainer.val_check_interval=8"]
    run += ["sample.max_new_tokens=0", "callbacks.sample_text=null", "callbacks.attention_maps=null", "explorer=false"]
    single = run_main("train", *tiny_training(tmp_path / "single", *run, "data.batch_size=16"))  # the reference
    assert single.returncode == 0, single.stderr[-3000:]
    (single_result,) = (tmp_path / "single").glob("*/*/result.json")

    log_dir, port = tmp_path / "nodes", free_port()
    args = tiny_training(log_dir, "trainer=ddp_cpu", "trainer.devices=1", "trainer.num_nodes=2", *run)
    agents = [
        subprocess.Popen(
            [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc_per_node=1", f"--node_rank={rank}"]
            + ["--master_addr=127.0.0.1", f"--master_port={port}", "--rdzv-id=two-nodes", "-m", "src.train", *args],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for rank in (0, 1)
    ]
    outputs = [agent.communicate(timeout=600)[0] for agent in agents]
    assert [agent.returncode for agent in agents] == [0, 0], outputs[0][-2000:] + outputs[1][-2000:]
    run_dir = log_dir / "torchrun" / "two-nodes"
    assert [p.relative_to(log_dir) for p in log_dir.rglob("result.json")] == [
        run_dir.relative_to(log_dir) / "result.json"
    ]
    assert (run_dir / ".hydra" / "config.yaml").is_file() and (run_dir / "train.log").is_file()
    assert "best val loss" in (run_dir / "train.log").read_text()  # rank 0 logs the run
    assert (run_dir / "train_rank_1.log").is_file()  # rank 1 logs apart and writes nothing else
    assert len(list((run_dir / "tensorboard").glob("events.out.tfevents.*"))) == 1
    ours, theirs = json.loads((run_dir / "result.json").read_text()), json.loads(single_result.read_text())
    assert ours["steps"] == theirs["steps"] == 8
    assert ours["best_val_loss"] == pytest.approx(theirs["best_val_loss"], abs=1e-4)


# ---------------------------------------------------------------- 6, 7. NaN and signals under DDP


@pytest.mark.slow
def test_a_nan_on_one_ddp_rank_stops_every_rank_naming_its_step(tmp_path):
    nan_on_rank_1 = [
        "+callbacks.nan._target_=tests.helpers.NaNOnRank",
        "+callbacks.nan.rank=1",
        "+callbacks.nan.step=2",
    ]
    args = ["trainer.max_steps=10", "trainer.val_check_interval=10", "trainer.log_every_n_steps=5", *nan_on_rank_1]
    result = run_cli("train", *tiny_training(tmp_path, "trainer=ddp_cpu", "model.num_layers=1", *args))
    assert result.returncode == 2, result.stderr[-3000:]
    # Rank 0's own loss goes NaN only at step 3; a flag DDP re-broadcast from rank 0 said 3.
    assert "error: the training loss became NaN or infinite at step 2:" in result.stderr
    assert not list(tmp_path.rglob("*.ckpt"))  # nothing diverged was saved


class FakeStrategy:
    def __init__(self) -> None:
        self.reductions = 0

    def reduce_boolean_decision(self, decision: bool, all: bool = True) -> bool:
        self.reductions += 1  # under DDP: one all-reduce, a host sync
        return decision


def test_ranks_agree_on_a_signal_at_log_steps_only(tmp_path):
    """Under DDP the signal check all-reduces: at log steps only, where every rank checks alike."""
    import signal as signals

    from src.training.callbacks import GracefulInterrupt

    interrupt = GracefulInterrupt()
    trainer = SimpleNamespace(world_size=2, log_every_n_steps=5, global_step=0, strategy=FakeStrategy())
    trainer.save_checkpoint = lambda path, weights_only: None
    trainer.callbacks, trainer.default_root_dir = [], str(tmp_path)
    saved_at = None
    for step in range(1, 13):
        trainer.global_step = step
        if step == 3:
            interrupt._handle(signals.SIGTERM, None)  # this rank's signal, mid-way between log steps
        interrupt.on_train_batch_end(trainer, None, None, None, step)
        if interrupt.saved_to is not None and saved_at is None:
            saved_at = step
    assert trainer.strategy.reductions == 1 and saved_at == 5  # 12 steps, log steps 5 and 10: one sync

    alone = GracefulInterrupt()  # one process: nothing to agree on, it stops at the next step
    trainer.world_size, trainer.strategy, trainer.global_step = 1, FakeStrategy(), 3
    alone._handle(signals.SIGTERM, None)
    alone.on_train_batch_end(trainer, None, None, None, 3)
    assert alone.saved_to is not None and trainer.strategy.reductions == 1


# ---------------------------------------------------------------- 9, 11. fp16 clipping, torch's minimum


def test_fp16_with_a_fused_adamw_and_clipping_is_refused_on_a_gpu():
    fp16 = ["trainer=gpu", "trainer.precision=16-mixed"]
    with pytest.raises(ValueError, match=r"trainer.precision=16-mixed with optimizer.fused=true cannot clip.*"):
        check_values(compose("train", fp16))
    for works in (["optimizer.fused=false"], ["trainer.gradient_clip_val=0"], ["trainer.precision=bf16-mixed"]):
        check_values(compose("train", [*fp16, *works]))
    check_values(compose("train", ["trainer=cpu", "trainer.precision=16-mixed"]))  # Lightning: bf16 on a CPU


# The torch APIs the code calls that arrived after torch 2.0, and the release that brought each.
TORCH_APIS = {
    "torch.nn.utils.get_total_norm": (2, 6),
    "torch.optim.AdamW(fused=True) on the CPU": (2, 4),
    "torch.is_autocast_enabled(device_type)": (2, 4),
}


def test_pyproject_asks_for_the_torch_that_has_every_api_the_code_calls():
    import torch

    (pin,) = re.findall(r'"(torch>=[^"]*)"', (ROOT / "pyproject.toml").read_text())
    minimum = tuple(int(n) for n in re.fullmatch(r"torch>=(\d+)\.(\d+)", pin).groups())
    assert minimum >= max(TORCH_APIS.values()), pin
    assert callable(torch.nn.utils.get_total_norm)
    sources = "\n".join(p.read_text() for p in (ROOT / "src").rglob("*.py"))
    assert "get_total_norm" in sources  # still called: drop it from the list when it is not


# ---------------------------------------------------------------- 8. the GPU's memory and count


def simulate_gpus(monkeypatch, count: int, gib: float) -> None:
    """torch reports `count` CUDA GPUs of `gib` GiB each (none of them is ever used)."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
    properties = SimpleNamespace(total_memory=int(gib * 2**30), name="Simulated GPU")
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: properties)


GPU_CASES = {
    "model fits the RAM, not the GPU": (
        ["trainer=gpu", "model.embedding_dim=2048", "model.num_layers=8", "data.batch_size=64"],
        r"need about \d+ GiB to train, more than GPU 0's \(Simulated GPU\) 2 GiB: choose a smaller model or batch",
    ),
    "more devices than GPUs": (
        ["trainer=ddp", "trainer.devices=4"],
        r"trainer.devices=4 asks for 4 cuda devices, "
        r"but this machine has 1: use trainer.devices=1 \(or -1 for all of them\)",
    ),
    "a GPU index it lacks": (
        ["trainer=gpu", "trainer.devices=[1]"],
        r"trainer.devices=\[1\] names a cuda device "
        r"this machine lacks: it has 1 \(0\)",
    ),
}


@pytest.mark.parametrize("case", GPU_CASES)
def test_a_run_the_gpus_cannot_hold_is_refused_in_one_line(case, tmp_path, monkeypatch, capsys):
    overrides, pattern = GPU_CASES[case]
    simulate_gpus(monkeypatch, count=1, gib=2)
    args = tiny_training(tmp_path / "outputs", *overrides, "trainer.precision=32-true")
    assert_refused(run_in_process(monkeypatch, capsys, train_main, args), pattern)
    assert not (tmp_path / "outputs").exists()
    assert check_values(compose("train", overrides)) is None  # the values alone are fine: the machine is not


# ---------------------------------------------------------------- 2. GPU slots of the parallel launcher


def test_parallel_jobs_of_uneven_length_take_a_free_gpu_not_their_job_numbers(sweep_job, monkeypatch):
    """2 simulated GPUs, one job each: job 0 runs long, job 1 ends early; job 2 goes to the GPU job 1
    freed (by job number it would join job 0 on GPU 0 while GPU 1 idles)."""
    monkeypatch.setattr(sweep_resources, "gpu_count", lambda: 2)
    monkeypatch.setattr(sweep_resources, "cpu_cores", lambda: 4)
    jobs = {}
    for num in (0, 1):
        cfg = sweep_job("hydra/launcher=parallel", "hydra.launcher.n_jobs=2", "trainer=gpu", num=num)
        jobs[num] = sweep_resources.configure_job_resources(cfg)
    assert (jobs[0].gpu, jobs[1].gpu) == (0, 1)
    jobs[1].release()  # job 1 ends; job 0 still trains
    cfg = sweep_job("hydra/launcher=parallel", "hydra.launcher.n_jobs=2", "trainer=gpu", num=2)
    jobs[2] = sweep_resources.configure_job_resources(cfg)
    assert jobs[2].gpu == 1 and list(cfg.trainer.devices) == [1]
    jobs[0].release()
    cfg = sweep_job("hydra/launcher=parallel", "hydra.launcher.n_jobs=2", "trainer=gpu", num=3)
    assert sweep_resources.configure_job_resources(cfg).gpu == 0  # and job 3 takes the one job 0 freed


def test_jobs_sharing_gpus_fill_every_gpu_before_doubling_up_and_wait_when_all_are_taken(tmp_path):
    taken = [sweep_resources.take_gpu_slot(tmp_path, gpus=2, jobs_per_gpu=2) for _ in range(4)]
    assert [gpu for gpu, _ in taken] == [0, 1, 0, 1]
    started = time.monotonic()
    timer = threading.Timer(0.3, os.close, [taken[1][1]])  # the job on GPU 1 ends in 0.3 s
    timer.start()
    assert sweep_resources.take_gpu_slot(tmp_path, gpus=2, jobs_per_gpu=2, wait=0.05)[0] == 1
    assert time.monotonic() - started >= 0.3


# ---------------------------------------------------------------- 10. MPS, and the GPU a command names


def test_generate_and_evaluate_take_mps_and_the_gpu_they_name(monkeypatch):
    import torch

    from src.evaluate import trainer_devices
    from src.training.checkpoint import pick_device
    from tests.helpers import hide_gpus

    hide_gpus(monkeypatch)
    with pytest.raises(ValueError, match=r"^device=mps asks for Apple's MPS, which this machine lacks: use device=cpu"):
        pick_device("mps")
    assert pick_device("auto") == torch.device("cpu")
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)  # an Apple machine
    assert pick_device("mps") == pick_device("auto") == torch.device("mps")
    assert trainer_devices(torch.device("mps")) == {"accelerator": "mps", "devices": 1}
    simulate_gpus(monkeypatch, count=2, gib=80)
    assert pick_device("auto") == torch.device("cuda") and pick_device("cuda:1") == torch.device("cuda:1")
    assert trainer_devices(torch.device("cuda:1")) == {"accelerator": "gpu", "devices": [1]}  # not GPU 0
    assert trainer_devices(torch.device("cuda")) == {"accelerator": "gpu", "devices": [0]}


@pytest.mark.gpu
def test_trainer_gpu_trains_a_tiny_model_on_the_gpu(tmp_path):
    from tests.helpers import train_in_process

    loss = train_in_process(tmp_path / "run", "trainer=gpu", "trainer.max_steps=20", "trainer.val_check_interval=20")
    assert 0 < loss < 4.2 and (tmp_path / "run" / "checkpoints" / "last.ckpt").is_file()


@pytest.mark.multi_gpu
def test_evaluate_on_cuda_1_runs_on_gpu_1(trained):
    import torch

    from src.evaluate import run

    run_dir, _ = trained
    for gpu in (0, 1):
        torch.cuda.reset_peak_memory_stats(gpu)
    run(compose("evaluate", [f"ckpt_path={run_dir / 'checkpoints' / 'last.ckpt'}", "device=cuda:1"]))
    assert torch.cuda.max_memory_allocated(1) > 0 and torch.cuda.max_memory_allocated(0) == 0


@pytest.mark.mps
def test_generate_samples_on_mps(trained, capsys):
    from src.generate import run

    run_dir, _ = trained
    texts = run(compose("generate", [f"ckpt_path={run_dir}", "device=mps", "max_new_tokens=50", "num_samples=2"]))
    assert [len(t) for t in texts] == [len("ROMEO:") + 50] * 2


# ---------------------------------------------------------------- 5. random streams across machines


def lit_on(rank: int, world: int, device: str, gathered: list | None = None):
    """A tiny GPTModule as rank `rank` of `world` processes training on `device` (a stub trainer)."""
    import torch

    from src.data.tokenizer import CharTokenizer
    from src.training.gpt_module import GPTModule

    model = {"kind": "seed", "context_window": 4, "embedding_dim": 4, "num_heads": 1}
    lit = GPTModule(model=model, tokenizer=CharTokenizer("ab").to_dict(), optimizer={"name": "sgd", "lr": 0.1})
    strategy = SimpleNamespace(
        root_device=torch.device(device),
        reduce=lambda tensor, reduce_op: tensor,
        all_gather=lambda tensor: torch.stack([tensor if r == rank else gathered[r] for r in range(world)]),
    )
    lit.trainer = SimpleNamespace(world_size=world, global_rank=rank, is_global_zero=rank == 0, strategy=strategy)
    return lit


def test_ddp_ranks_draw_their_own_dropout_and_resume_their_own_streams(caplog):
    import torch

    draws = []
    for rank in (0, 1):
        torch.manual_seed(1337)
        lit_on(rank, 2, "cpu").setup("fit")
        draws.append(torch.rand(4))
    assert not torch.equal(draws[0], draws[1])  # nanoGPT's seed + rank: masks differ between ranks

    torch.manual_seed(5)
    other = torch.get_rng_state()  # rank 1's stream at the save
    torch.manual_seed(4)
    checkpoint = {}
    lit_on(0, 2, "cpu", gathered=[None, other]).on_save_checkpoint(checkpoint)
    assert len(checkpoint["rng_ranks"]) == 2
    lit_on(1, 2, "cpu").on_load_checkpoint(checkpoint)
    assert torch.equal(torch.get_rng_state(), other)  # rank 1 resumes its own stream, not rank 0's
    with caplog.at_level("WARNING"):
        lit_on(0, 3, "cpu").on_load_checkpoint(checkpoint)
    assert "resuming without each process's own random stream (saved by 2 process(es), resumed by 3)" in caplog.text


def test_a_run_saved_with_more_gpus_or_on_mps_resumes_elsewhere_saying_what_it_could_not_restore(monkeypatch, caplog):
    import torch

    simulate_gpus(monkeypatch, count=1, gib=80)
    restored = []

    def set_rng_state_all(states):  # torch's own, on a machine with one GPU
        if len(states) > 1:
            raise RuntimeError("CUDA error: invalid device ordinal")

    monkeypatch.setattr(torch.cuda, "set_rng_state_all", set_rng_state_all)
    monkeypatch.setattr(torch.cuda, "set_rng_state", lambda state, device: restored.append((state, device)))
    four_gpus = [torch.full((16,), i, dtype=torch.uint8) for i in range(4)]  # saved where 4 GPUs were visible
    lit_on(0, 1, "cuda:0").on_load_checkpoint({"rng": {"torch": torch.get_rng_state(), "cuda": four_gpus}})
    assert len(restored) == 1 and torch.equal(restored[0][0], four_gpus[0])

    monkeypatch.setattr(torch.mps, "get_rng_state", lambda: torch.full((8,), 7, dtype=torch.uint8))
    on_mac = {}
    lit_on(0, 1, "mps").on_save_checkpoint(on_mac)
    assert torch.equal(on_mac["rng"]["mps"], torch.full((8,), 7, dtype=torch.uint8))  # MPS's stream is saved
    with caplog.at_level("WARNING"):
        lit_on(0, 1, "cuda:0").on_load_checkpoint(on_mac)
    assert "resuming without the cuda:0 random stream (the run was saved on mps)" in caplog.text


@pytest.mark.slow
def test_a_signal_to_one_ddp_rank_stops_every_rank_at_the_next_log_step_with_a_checkpoint(tmp_path):
    import torch

    signal_rank_1 = ["+callbacks.signal._target_=tests.helpers.SignalRankAt", "+callbacks.signal.rank=1"]
    signal_rank_1 += ["+callbacks.signal.step=3", "+callbacks.signal.signal_name=SIGTERM"]
    args = ["trainer.max_steps=20", "trainer.val_check_interval=20", "trainer.log_every_n_steps=5", *signal_rank_1]
    run_dir = tmp_path / "run"
    result = run_cli(
        "train", *tiny_training(tmp_path, "trainer=ddp_cpu", "model.num_layers=1", *args, f"hydra.run.dir={run_dir}")
    )
    assert result.returncode == 143, result.stderr[-3000:]
    assert f"SIGTERM at step 5: saved {run_dir / 'checkpoints' / 'last.ckpt'}" in result.stderr
    assert torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=False)["global_step"] == 5
