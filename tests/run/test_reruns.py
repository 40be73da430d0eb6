"""Reruns x run states: a command typed again into a hydra.run.dir that holds a run.

Issue 37 items 2 and 3: the same hydra.run.dir with another trainer.max_steps replaced a finished
run's checkpoints and result.json (tensorboard/ then held both runs); rerunning an interrupted run's
command (instead of the printed ckpt_path= resume) started at step 0 and overwrote its last.ckpt.
Now: nothing saved there -> it runs; the same command's interrupted run -> resumed, saying so; a
finished run, or an interrupted one of other settings -> refused in one line, nothing written;
overwrite=true -> replaced.
"""

import os
import re
import shutil

import pytest
from hydra.core.hydra_config import HydraConfig
from omegaconf import OmegaConf

from src import train as train_module
from src.rules import ConfigError
from src.run import rundir
from src.run.cli import compose, job_config
from src.run.rundir import continue_run
from tests.helpers import tiny_training, train_in_process

SETTINGS = ("trainer.max_steps=6", "trainer.val_check_interval=3", "sample.max_new_tokens=0")


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished tiny run, with the .hydra/overrides.yaml the command line would have written."""
    run = tmp_path_factory.mktemp("runs") / "run"
    train_in_process(run, *SETTINGS, "callbacks.sample_text=null", "callbacks.attention_maps=null")
    (run / ".hydra").mkdir()
    OmegaConf.save(OmegaConf.create(command(run)), run / ".hydra" / "overrides.yaml")
    return run


def command(run, *extra):
    return tiny_training(run.parent, f"hydra.run.dir={run}", *SETTINGS, *extra)


def in_state(finished, tmp_path, state):
    run = tmp_path / "run"
    shutil.copytree(finished, run)
    if state in ("interrupted", "nothing saved"):
        (run / "result.json").unlink()  # as a run killed or stopped before its end leaves it
    if state == "nothing saved":
        shutil.rmtree(run / "checkpoints")
    return run


def checked(argv):
    """check on the command line as continue_run rewrote it, its config composed as the
    command composes it (its run directory resolved); the lock it took released."""
    argv = continue_run(argv)
    outside = HydraConfig.instance().cfg
    try:
        train_module.check(job_config(compose("train", argv, with_hydra=True)), argv)
    finally:
        HydraConfig.instance().cfg = outside
        for fd in rundir.HELD.values():
            os.close(fd)
        rundir.HELD.clear()
    return argv


def test_the_same_command_resumes_its_interrupted_run_and_says_so(finished, tmp_path, capsys):
    run = in_state(finished, tmp_path, "interrupted")
    argv = checked(command(run))
    assert f"ckpt_path='{run / 'checkpoints' / 'last.ckpt'}'" in argv and f"hydra.run.dir='{run}'" in argv
    assert "holds an interrupted run of this command: resuming it" in capsys.readouterr().err


@pytest.mark.parametrize(
    "state,extra,said",
    [
        ("finished", (), r"holds a finished run \(6 steps, best val loss \d\.\d{4}\): kept; continue it with"),
        ("finished", ("trainer.max_steps=9",), r"holds a finished run"),
        ("interrupted", ("model.num_heads=4",), r"holds an interrupted run of other settings \(.*model\.num_heads=2"),
    ],
)
def test_a_run_directory_holding_another_run_is_refused_and_kept(finished, tmp_path, state, extra, said):
    run = in_state(finished, tmp_path, state)
    before = {p: p.stat().st_mtime_ns for p in run.rglob("*")}
    with pytest.raises(ConfigError, match=said + r".*or add overwrite=true to replace it"):
        checked(command(run, *extra))
    assert {p: p.stat().st_mtime_ns for p in run.rglob("*")} == before


@pytest.mark.parametrize("state", ["finished", "interrupted"])
def test_overwrite_true_replaces_the_run(finished, tmp_path, state):
    run = in_state(finished, tmp_path, state)
    checked(command(run, "overwrite=true"))
    assert not (run / "checkpoints").exists() and not (run / "tensorboard").exists()
    assert not (run / "result.json").exists()


def test_a_run_directory_with_nothing_saved_takes_the_run(finished, tmp_path):
    run = in_state(finished, tmp_path, "nothing saved")
    assert not any("ckpt_path" in a for a in checked(command(run)))


def test_a_resume_drops_the_runs_own_additions_typed_again_which_hydra_refuses_twice():
    """A requeued SLURM job runs its first command again, `+callbacks...` and all, behind the run's own
    overrides (tests/cluster/test_slurm.py): Hydra refused `+key=` twice ("An item is already at ...")."""
    saved = ["+callbacks.pause.step=3", "model.num_heads=2", "~callbacks.sample_text", "+seed_note=1"]
    typed = ["+callbacks.pause.step=3", "model.num_heads=4", "~callbacks.sample_text", "seed_note=2"]
    assert rundir.not_typed_again(saved, typed) == ["model.num_heads=2", "+seed_note=1"]  # typed later: they win


@pytest.mark.slow
def test_a_copied_run_resumed_keeps_its_best_checkpoint(trained, tmp_path):
    """Issue 48: a run folder copied elsewhere and resumed lost its best score (Lightning reloads it only
    at the same path), so the first validation after the resume replaced best.ckpt even when worse."""
    import torch

    from tests.helpers import run_main

    run_dir, _ = trained
    copy = tmp_path / "copied run"
    shutil.copytree(run_dir, copy)
    best = copy / "checkpoints" / "best.ckpt"
    before = torch.load(best, weights_only=False)
    result = run_main("train", f"ckpt_path={copy}", "trainer.max_steps=60", "optimizer.lr=30", "optimizer.min_lr=30")
    assert result.returncode == 0, result.stderr[-2000:]
    printed = result.stdout + result.stderr
    worse = [float(x) for x in re.findall(r"step +60 \| val loss (\d+\.\d+)", printed)]
    after = torch.load(best, weights_only=False)
    assert worse and worse[0] > before["best_val_loss"] + 0.1, printed[-2000:]  # the resumed run got worse
    assert after["global_step"] == before["global_step"] < 60  # and best.ckpt stayed the best
    assert f"best val loss {before['best_val_loss']:.4f} -> {best}" in printed
