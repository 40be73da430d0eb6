"""Nothing lost: interrupts, hard kills and a diverging loss, on the real training command.

The interrupted and killed runs are processes (the signal is what is tested); the runs they are
compared with, and the resumes, run the command's main() in this process (run_main)."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from src.training.callbacks import atomic_torch_save
from src.training.checkpoint import find_checkpoint, load_trained, read_checkpoint
from tests.helpers import ROOT, run_main, scalars, tiny_training

pytestmark = pytest.mark.slow  # trainings, end to end (make test-fast skips them)

STEPS = 60


def start_training(*overrides: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "src.train", *overrides],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def wait_for_line(proc: subprocess.Popen, text: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if text in line:
            return
        if not line and proc.poll() is not None:
            raise AssertionError(f"training ended before printing {text!r}: {proc.stderr.read()[-2000:]}")
    raise AssertionError(f"no {text!r} within {timeout}s")


def with_dropout(log_dir: Path, run_dir: Path, *extra: str) -> list[str]:
    """Dropout on, so resuming must also restore the random stream, not just the weights."""
    return tiny_training(
        log_dir,
        "model.dropout=0.1",
        f"trainer.max_steps={STEPS}",
        "trainer.val_check_interval=10",
        "sample.max_new_tokens=0",
        f"hydra.run.dir={run_dir}",
        *extra,
    )


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> dict[int, float]:
    log_dir = tmp_path_factory.mktemp("uninterrupted")
    result = run_main("train", *with_dropout(log_dir, log_dir / "run"))
    assert result.returncode == 0, result.stderr[-2000:]
    return dict(scalars(log_dir / "run")["loss/train"])


@pytest.mark.parametrize("sig,status", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_saves_a_checkpoint_and_resuming_replays_the_same_losses(tmp_path, uninterrupted, sig, status):
    run_dir = tmp_path / "run"
    proc = start_training(*with_dropout(tmp_path, run_dir))
    wait_for_line(proc, "step     20 |")
    proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == status
    message = [line for line in stderr.splitlines() if line.strip()]
    assert len(message) == 1 and message[0].startswith(f"error: {sig.name} at step "), stderr
    assert f"resume with: python -m src.train ckpt_path={run_dir}" in message[0]
    assert message[0] in (run_dir / "train.log").read_text()  # what the terminal showed, the log keeps
    stopped_at = int(message[0].split("at step ")[1].split(":")[0])
    assert 20 <= stopped_at < STEPS
    assert read_checkpoint(run_dir / "checkpoints" / "last.ckpt")["global_step"] == stopped_at

    resumed = run_main("train", f"ckpt_path={run_dir}")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    losses = dict(scalars(run_dir)["loss/train"])
    assert sorted(losses) == list(range(STEPS))  # every step exactly once, in one run directory
    for step in range(STEPS):
        assert losses[step] == pytest.approx(uninterrupted[step], abs=1e-6), step


def test_resuming_muon_replays_the_same_losses(tmp_path):
    """optimizer=muon: both states (Muon's momentum, AdamW's moments and step) come back exactly."""
    straight = run_main("train", *with_dropout(tmp_path / "a", tmp_path / "a" / "run", "optimizer=muon"))
    assert straight.returncode == 0, straight.stderr[-2000:]
    expected = dict(scalars(tmp_path / "a" / "run")["loss/train"])
    run_dir = tmp_path / "b" / "run"
    proc = start_training(*with_dropout(tmp_path / "b", run_dir, "optimizer=muon"))
    wait_for_line(proc, "step     20 |")
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=120)
    assert proc.returncode == 130
    resumed = run_main("train", f"ckpt_path={run_dir}")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    losses = dict(scalars(run_dir)["loss/train"])
    assert sorted(losses) == list(range(STEPS))
    for step in range(STEPS):
        assert losses[step] == pytest.approx(expected[step], abs=1e-6), step


def test_kill_9_at_any_moment_leaves_a_loadable_checkpoint_and_last_resumes(tmp_path):
    log_dir, run_dir = tmp_path / "outputs", tmp_path / "outputs" / "run"
    no_media = ["callbacks.sample_text=null", "callbacks.attention_maps=null"]
    overrides = with_dropout(log_dir, run_dir, "callbacks.last_checkpoint.every_n_train_steps=1", *no_media)
    for delay in (0.0, 0.13, 0.37):  # after the first save: mid-step, mid-write, anywhere
        proc = start_training(*overrides)
        deadline = time.monotonic() + 120
        while not (run_dir / "checkpoints" / "last.ckpt").exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(delay)
        proc.kill()
        proc.communicate()
        newest = find_checkpoint("last", log_dir)
        model = load_trained(newest).model  # loads whole, every time
        assert all(torch.isfinite(p).all() for p in model.parameters())
        overrides = [f"paths.log_dir={log_dir}", "ckpt_path=last"]  # the next start resumes
    resumed = run_main("train", *overrides)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert read_checkpoint(run_dir / "checkpoints" / "last.ckpt")["global_step"] == STEPS
    assert not list((run_dir / "checkpoints").glob("*.partial-*"))


def test_atomic_save_keeps_the_old_file_when_a_write_fails(tmp_path, monkeypatch):
    path = tmp_path / "last.ckpt"
    atomic_torch_save({"step": 1}, path)

    def broken_disk(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", broken_disk)
    with pytest.raises(OSError, match="No space"):
        atomic_torch_save({"step": 2}, path)
    assert torch.load(path)["step"] == 1
    assert list(tmp_path.iterdir()) == [path]


def test_a_diverging_loss_stops_at_its_step_and_keeps_the_good_checkpoint(tmp_path):
    run_dir = tmp_path / "run"
    overrides = tiny_training(
        tmp_path,
        "optimizer=sgd",
        "optimizer.lr=3",  # plain SGD without clipping at this rate blows up after ~10 steps
        "trainer.gradient_clip_val=0",
        "trainer.val_check_interval=5",
        f"hydra.run.dir={run_dir}",
    )
    result = run_main("train", *overrides)
    assert result.returncode == 2
    message = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(message) == 1 and "became NaN or infinite at step" in message[0], result.stderr
    bad_step = int(message[0].split("at step ")[1].split(":")[0])
    last = run_dir / "checkpoints" / "last.ckpt"
    assert last.is_file(), "the run should have saved a good checkpoint before diverging"
    assert read_checkpoint(last)["global_step"] <= bad_step
    assert all(torch.isfinite(p).all() for p in load_trained(last).model.parameters())


# ---------------------------------------------------------------- a sweep's faults (issue 25)
