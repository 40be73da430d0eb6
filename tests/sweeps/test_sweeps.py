"""Multirun sweeps, failures inside a sweep, DDP on the CPU, and the Optuna search.

The sweeps end to end are marked slow (make test-fast skips them): each runs the command's main() in
this process (run_main; the parallel launcher's workers are its own processes), except where the
process is what is tested: DDP's second rank, and a sweep stopped by a signal. The sweep's parts (its
worker pool, its rows, its stop line) are tested in this process too.
"""

import fcntl
import json
import os
import signal
import struct
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest
import torch
from omegaconf import open_dict, read_write
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from src.run.cli import compose
from src.run.record import write_record
from src.sweeps import summary as sweep_summary
from tests.helpers import ROOT, run_cli, run_main, tiny_training

FAST = ["model.num_layers=1", "trainer.max_steps=10", "trainer.val_check_interval=10", "sample.max_new_tokens=0"]


def job_dirs(sweep_dir):
    return sorted((p for p in sweep_dir.iterdir() if p.name.isdigit()), key=lambda p: int(p.name))


@pytest.mark.slow
def test_a_2x2_sweep_gives_four_jobs_a_summary_and_a_plot(tmp_path):
    sweep = tmp_path / "sweep"
    args = tiny_training(tmp_path, *FAST, f"hydra.sweep.dir={sweep}", "callbacks.attention_maps=null")
    result = run_main("train", "-m", *args, "model.num_heads=2,4", "model.embedding_dim=32,48")  # last wins
    assert result.returncode == 0, result.stderr[-3000:]
    jobs = job_dirs(sweep)
    assert [p.name for p in jobs] == ["0", "1", "2", "3"]
    names = set()
    for job in jobs:
        runs = [p for p in (job / "tensorboard").iterdir() if p.is_dir()]
        assert len(runs) == 1 and list(runs[0].glob("events.out.tfevents.*"))
        names.add(frozenset(runs[0].name.split(",")))  # the order follows the command line
        events = EventAccumulator(str(runs[0]))  # the job's one TensorBoard run
        events.Reload()
        assert "loss/val" in events.Tags()["scalars"]
        assert (job / "checkpoints" / "best.ckpt").is_file() and (job / ".hydra" / "config.yaml").is_file()
        assert json.loads((job / "result.json").read_text())["status"] == "ok"
        assert not (job / "explore.html").exists()  # media, like the samples: sweep.media=true keeps them
    assert names == {frozenset({f"num_heads={h}", f"embedding_dim={d}"}) for h in (2, 4) for d in (32, 48)}
    summary = (sweep / "summary.md").read_text()
    assert summary.count("| ok |") == 4
    title, _, every, _, *table = summary.splitlines()
    assert title == f"# Sweep {tmp_path.name}/sweep"  # Hydra's <date>/<time>: no machine's folders (issue 47)
    assert every.startswith("Every job: `") and "model.num_layers=1" in every and "num_heads" not in every
    assert "\n".join(table) in result.stdout  # the same table, printed
    png = (sweep / "summary.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", png[16:24])[0] > 0

    again = run_main("train", "-m", *args, "model.num_heads=2,4", "model.embedding_dim=32,48")
    assert again.returncode == 0
    assert (again.stdout + again.stderr).count("already finished") == 4  # kept, not retrained
    for job in jobs:
        runs = [p for p in (job / "tensorboard").iterdir() if p.is_dir()]
        assert len(list(runs[0].glob("events.out.tfevents.*"))) == 1


@pytest.mark.slow
def test_an_invalid_point_fails_alone_and_the_parallel_launcher_gives_the_same_sweep(tmp_path):
    losses = {}
    for launcher in ("basic", "parallel"):
        sweep = tmp_path / launcher
        args = tiny_training(tmp_path, *FAST, f"hydra.sweep.dir={sweep}", "model.embedding_dim=32")
        if launcher == "parallel":  # 3 jobs on 2 workers: each takes half the cores
            args += ["hydra/launcher=parallel", "hydra.launcher.n_jobs=2"]
        result = run_main("train", "-m", *args, "model.num_heads=2,3,4")
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

    again = run_main("train", "-m", *args, "model.num_heads=2,3,4")
    assert again.returncode == 1 and (again.stdout + again.stderr).count("already finished") == 2


@pytest.mark.slow
def test_ddp_on_the_cpu_writes_one_run_directory(tmp_path):
    log_dir = tmp_path / "outputs"
    result = run_cli(  # a process: DDP starts a second rank by running this command line again
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
    evaluated = run_main("evaluate", f"ckpt_path={run / 'checkpoints' / 'last.ckpt'}")
    row = next(line for line in evaluated.stdout.splitlines() if line.startswith("val "))
    assert abs(float(row.split()[1]) - logged) < 1e-4  # the two ranks' shards add up to the exact loss


@pytest.mark.slow
def test_optuna_searches_two_trials(tmp_path):
    sweep = tmp_path / "optuna"
    searched = ("model.embedding_dim=", "model.num_heads=", "model.context_window=", "optimizer.lr=")
    args = [a for a in tiny_training(tmp_path, *FAST, f"hydra.sweep.dir={sweep}") if not a.startswith(searched)]
    result = run_main("train", "hparams_search=optuna", "hydra.sweeper.n_trials=2", *args)
    assert result.returncode == 0, result.stderr[-3000:]
    assert [p.name for p in job_dirs(sweep)] == ["0", "1"]
    best = (sweep / "optimization_results.yaml").read_text()
    assert "best_value" in best and "optimizer.lr" in best
    assert (sweep / "summary.md").read_text().count("| ok |") == 2


def test_the_slurm_launcher_follows_the_trainer():
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    from src.run.cli import CONFIG_DIR
    from src.run.config import register

    register("train")  # the schemas the YAML files name
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        gpu, cpu = (
            hydra_compose("train", ["hydra/launcher=slurm", *trainer], return_hydra_config=True).hydra.launcher
            for trainer in (["trainer=ddp", "trainer.devices=4", "trainer.num_nodes=2"], ["trainer=ddp_cpu"])
        )
    assert gpu._target_ == cpu._target_ == "hydra_plugins.scratchgpt_launcher.SlurmLauncher"
    ask = ("nodes", "tasks_per_node", "gpus_per_node", "cpus_per_task", "mem_gb")
    assert tuple(gpu[k] for k in ask) == (2, 4, 4, 8, 64)  # a task per GPU
    assert tuple(cpu[k] for k in ask) == (1, 2, 0, 1, 4)  # no GPU; a core and 2 GB per rank
    assert compose("train", ["trainer=ddp"]).trainer.strategy == "ddp"


@pytest.mark.slow
def test_a_stopped_sweep_says_so_once_and_a_job_resumed_by_hand_is_not_trained_again(tmp_path):
    """Issue 25: a signal to a sequential sweep stops it with its summary, in one line, exit 130; the job it
    stopped, finished by the resume command of a single run, is kept by the next rerun of the sweep (it
    retrained that job from step 0), which runs the job never started."""
    sweep = tmp_path / "sweep"
    args = [
        "-m",
        *tiny_training(tmp_path, "model.num_layers=1", "trainer.max_steps=40", "trainer.val_check_interval=4"),
        f"hydra.sweep.dir={sweep}",
        "sweep.media=false",
        "seed=1,2",
    ]
    proc = subprocess.Popen(
        [sys.executable, "-m", "src.train", *args], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    for line in proc.stdout:
        if "val loss" in line and not line.startswith("step      0"):  # a validation after step 0: last.ckpt exists
            proc.send_signal(signal.SIGINT)
            break
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130
    assert stderr.strip() == (
        "error: SIGINT stopped the sweep: 0 of 2 jobs finished; interrupted: 0; 1 not started; "
        "rerun the same command to resume it"
    )
    assert "| 0 | seed=1 |" in stdout and "| interrupted |" in (sweep / "summary.md").read_text()
    stopped = torch.load(sweep / "0" / "checkpoints" / "last.ckpt", weights_only=False)["global_step"]
    assert json.loads((sweep / "0" / "result.json").read_text())["status"] == "interrupted"

    by_hand = run_main("train", f"ckpt_path={sweep / '0'}")  # a single run's resume command
    assert by_hand.returncode == 0, by_hand.stderr[-3000:]
    finished = (sweep / "0" / "result.json").read_text()
    assert json.loads(finished)["steps"] == 40 and stopped < 40

    again = run_main("train", *args)
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"{sweep / '0'} already finished" in again.stdout and "resuming" not in again.stdout
    assert (sweep / "0" / "result.json").read_text() == finished  # kept, not trained again
    assert json.loads((sweep / "1" / "result.json").read_text())["steps"] == 40


@pytest.mark.slow
def test_another_grid_into_a_sweep_directory_is_refused_and_a_smaller_one_summarises_its_own_jobs(tmp_path):
    """Issue 25: a second grid into the same hydra.sweep.dir overwrote finished jobs 0 and 1 (a job was known
    by its number), and the first grid's job 2 stayed in summary.md. Now another grid is refused in one line
    before anything is written; a grid of the first grid's jobs 0 and 1 summarises those two, and a job
    whose directory another live training holds is refused without touching its record."""
    sweep = tmp_path / "sweep"
    args = [
        "-m",
        *tiny_training(tmp_path, "model.num_layers=1", "trainer.max_steps=4", "trainer.val_check_interval=4"),
        f"hydra.sweep.dir={sweep}",
    ]
    first = run_main("train", *args, "seed=1,2,3")
    assert first.returncode == 0, first.stderr[-3000:]
    files = {p: p.read_bytes() for p in sweep.rglob("*") if p.is_file()}

    other = run_main("train", *args, "seed=4,5")
    assert other.returncode == 2
    assert other.stderr.strip() == (
        f"error: hydra.sweep.dir={sweep} holds another sweep: its job 0 is seed=1, this sweep's job 0 is seed=4 "
        "(2 such jobs): choose a new hydra.sweep.dir, or overwrite=true to replace them"
    )
    assert {p: p.read_bytes() for p in sweep.rglob("*") if p.is_file()} == files  # nothing written

    (sweep / "1" / "result.json").unlink()  # as if `python -m src.train hydra.run.dir=<sweep>/1` ran there
    held = os.open(sweep / "1" / ".lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(held, fcntl.LOCK_EX)  # and still trained
    try:
        smaller = run_main("train", *args, "seed=1,2")
    finally:
        os.close(held)
    assert smaller.returncode == 1
    assert smaller.stderr.splitlines() == [
        f"error: job 1 (seed=2): another training is running in {sweep / '1'}: wait for it to end, "
        "or choose another hydra.run.dir",
        "error: 1 of 2 jobs failed: [1]",
    ]
    summary = (sweep / "summary.md").read_text()
    assert "| 0 | seed=1 |" in summary and "| 1 | seed=2 |" in summary and "seed=3" not in summary
    assert "FAILED: refused: another training is running in its directory" in summary
    assert (sweep / "0" / "result.json").read_bytes() == files[sweep / "0" / "result.json"]


# ---------------------------------------------------------------- the sweep's parts, in this process


@pytest.mark.slow
def test_a_killed_worker_fails_only_its_own_job():
    """joblib's one executor of n workers kills the others when one dies and fails every job not yet
    returned; the launcher's pool gives each worker an executor of its own."""
    from joblib.externals.loky.process_executor import BrokenProcessPool

    from src.sweeps.launcher import WorkerPool

    pool = WorkerPool(2)
    try:
        victim, other = pool.submit(0, time.sleep, 60), pool.submit(1, sum, [1, 2], -3)
        assert other.result(timeout=60) == 0  # both workers are up
        os.kill(pool.workers[0].pid, signal.SIGKILL)
        with pytest.raises(BrokenProcessPool):
            victim.result(timeout=30)
        assert pool.submit(1, sum, [1, 2]).result(timeout=30) == 3  # the other worker goes on
        assert pool.replace(0) == "killed by SIGKILL"
        assert pool.submit(0, sum, [2]).result(timeout=60) == 2  # a new worker takes the slot
        assert os.getpgid(pool.workers[0].pid) == pool.workers[0].pid  # a terminal's Ctrl-C reaches the main only
    finally:
        pool.shutdown()


def rows_of(sweep_job, tmp_path, records: dict[int, dict], launched: dict[int, list[str]], returned_none=()):
    cfg = sweep_job("model.num_heads=2", sweep_overrides=["model.num_heads=1,2,4,8"])
    for number, record in records.items():
        (tmp_path / str(number)).mkdir()
        write_record(tmp_path / str(number), record)
    state = sweep_summary.ThisSweep(cfg, launched, set(returned_none))
    return cfg, state


def test_a_sweeps_rows_are_its_own_jobs_as_their_directories_record_them(sweep_job, tmp_path, monkeypatch):
    heads = {n: [f"model.num_heads={h}"] for n, h in enumerate((1, 2, 4, 8))}
    records = {
        0: {"overrides": heads[0], "run_name": "num_heads=1", "status": "ok", "best_val_loss": 2.0},
        1: {"overrides": ["model.num_heads=16"], "run_name": "num_heads=16", "status": "ok"},  # another grid's
        2: {"overrides": heads[2], "status": "running"},  # refused: another training holds it
        3: {"overrides": heads[3], "status": "running"},  # stopped before it said so
        9: {"overrides": ["model.num_heads=32"], "status": "ok"},  # a stale job of a larger grid
    }
    cfg, state = rows_of(sweep_job, tmp_path, records, {**heads, 4: ["model.num_heads=3"]}, returned_none={2})
    monkeypatch.setattr(sweep_summary, "SWEEP", state)
    rows = sweep_summary.sweep_rows(cfg)
    assert [(r["job"], r["run_name"], r["status"]) for r in rows] == [
        (0, "num_heads=1", "ok"),
        (1, "num_heads=2", "failed"),
        (2, "num_heads=4", "failed"),
        (3, "num_heads=8", "interrupted"),
        (4, "num_heads=3", "not started"),
    ]
    assert rows[1]["reason"] == f"{tmp_path / '1'} holds another job (num_heads=16): kept"
    assert rows[2]["reason"] == "refused: another training is running in its directory"
    # stopped before its first job: none of its own
    monkeypatch.setattr(sweep_summary, "SWEEP", sweep_summary.ThisSweep(cfg))
    assert sweep_summary.sweep_rows(cfg) == []
    assert sweep_summary.stop_line("SIGTERM", rows, 6, sweep_summary.resume_hint(cfg)) == (
        "SIGTERM stopped the sweep: 1 of 6 jobs finished; interrupted: 3; failed: 1, 2; 2 not started; "
        "rerun the same command to resume it"
    )
    with read_write(cfg.hydra), open_dict(cfg):  # an Optuna search: its study, not its jobs, goes on
        cfg.hydra.sweeper = {"_target_": "hydra_plugins.scratchgpt_sweeper.OptunaSweeper", "storage": None}
        assert "its study was in memory: rerunning starts it over" in sweep_summary.resume_hint(cfg)
        cfg.hydra.sweeper.storage = "sqlite:///study.db"
        assert sweep_summary.resume_hint(cfg) == (
            "rerun the same command to go on to n_trials: the study in sqlite:///study.db keeps its trials"
        )


def test_another_grid_is_found_before_the_sweep_but_not_a_job_resumed_by_hand(sweep_job, tmp_path):
    cfg = sweep_job("model.num_heads=2")
    with read_write(cfg.hydra), open_dict(cfg):
        cfg.hydra.overrides.task = ["model.num_heads=8,16", "seed=3"]
    (tmp_path / "0").mkdir()
    (tmp_path / "1").mkdir()
    # job 0 as `python -m src.train ckpt_path=<job 0>` finished it: where and how differ, not what
    resumed = ["model.num_heads=8", "seed=3", f"ckpt_path='{tmp_path / '0'}'", "progress_bar=true"]
    write_record(tmp_path / "0", {"overrides": resumed, "status": "ok"})
    write_record(tmp_path / "1", {"overrides": ["model.num_heads=4", "seed=3"], "run_name": "num_heads=4"})
    assert sweep_summary.other_jobs(cfg) == [(1, "num_heads=4", "num_heads=16")]
    with read_write(cfg.hydra), open_dict(cfg):
        cfg.hydra.overrides.task.append("overwrite=true")
    assert sweep_summary.other_jobs(cfg) == []


def test_a_worker_whose_main_process_is_gone_saves_and_stops(tmp_path, monkeypatch):
    """kill -9 of a parallel sweep's main process left its workers training, orphaned."""
    from src.training.callbacks import PARENT_ENV, PARENT_GONE, GracefulInterrupt

    saved = []
    trainer = SimpleNamespace(world_size=1, log_every_n_steps=5, global_step=7, callbacks=[])
    trainer.strategy = SimpleNamespace(reduce_boolean_decision=lambda decision, all: decision)
    trainer.save_checkpoint, trainer.default_root_dir = lambda path, weights_only: saved.append(path), str(tmp_path)
    monkeypatch.setenv(PARENT_ENV, str(os.getppid()))
    alive = GracefulInterrupt()
    alive.on_train_batch_end(trainer, None, None, None, 7)
    assert alive.received is None and not saved  # its parent lives: it trains on
    monkeypatch.setenv(PARENT_ENV, str(os.getpid()))  # a pid that is not this process's parent: gone
    orphan = GracefulInterrupt()
    orphan.on_train_batch_end(trainer, None, None, None, 7)
    assert orphan.received == PARENT_GONE and saved == [tmp_path / "checkpoints" / "last.ckpt"]
    monkeypatch.delenv(PARENT_ENV)
    assert GracefulInterrupt().parent is None  # a run of its own watches nothing


@pytest.mark.slow
def test_the_isoflop_preset_trains_each_job_to_its_budget_and_fits_its_curves(tmp_path):
    sweep = tmp_path / "sweep"
    set_by_the_grid = ("trainer.max_steps=", "model.num_layers=", "model.embedding_dim=", "model.num_heads=")
    tiny = [a for a in tiny_training(tmp_path) if not a.startswith(set_by_the_grid)]  # the budget, the dial
    grid = ["hydra.sweeper.params.trainer.flops=3e8,6e8", "hydra.sweeper.params.model.scale=1,2,3"]
    result = run_main(
        "train",
        "hparams_search=isoflop",
        *tiny,
        "data.val_tokens=4000",
        f"hydra.sweep.dir={sweep}",
        *grid,
        "hydra.sweeper.params.seed=1",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    records = [json.loads((job / "result.json").read_text()) for job in job_dirs(sweep)]
    assert len(records) == 6 and {r["status"] for r in records} == {"ok"}
    assert records[0]["run_name"] == "flops=3e+08,scale=1,seed=1"  # not as Hydra writes the float: 300000000.0
    for record in records:
        budget = float(next(o for o in record["overrides"] if o.startswith("trainer.flops=")).split("=")[1])
        step = record["flops_per_token"] * 8 * 16  # a step of 8 windows of 16 tokens
        assert (
            budget - step < record["flops"] <= budget
            and record["tokens"] == record["flops"] / record["flops_per_token"]
        )
    summary = (sweep / "summary.md").read_text()
    section = summary[summary.index("## isoFLOP fit") :]
    assert "| 3e+08 | 3 |" in section and "| 6e+08 | 3 |" in section  # each budget's best of its 3 sizes
    assert "N_opt ~ C^alpha" in section or "No isoFLOP fit: " in section
    assert (sweep / "isoflop.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
