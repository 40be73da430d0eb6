"""The commands as a user runs them: train, then sample, evaluate and resume from its checkpoint.

Each of train, generate and evaluate runs once here as a process (`python -m src.<command>`, run_cli);
the rest call the same main() in the test's process (run_main), which is what they test."""

import re

import pytest

from tests.helpers import run_cli, run_main, scalars, tiny_training

pytestmark = pytest.mark.slow  # end to end (make test-fast skips them)


def test_training_leaves_checkpoints_events_config_and_a_sample(trained):
    run_dir, output = trained
    assert (run_dir / "checkpoints" / "best.ckpt").is_file()
    assert (run_dir / "checkpoints" / "last.ckpt").is_file()
    assert (run_dir / ".hydra" / "config.yaml").is_file()
    assert "sample:\nFirst Citizen:" in output  # the text's own opening
    assert "Traceback" not in output


def test_tensorboard_has_the_validation_metrics_and_the_loss_falls(trained):
    run_dir, _ = trained
    s = scalars(run_dir)
    for tag in [
        "loss/train",
        "loss/val",
        "val/ppl",
        "val/bpc",
        "val/acc",
        "train/lr",
        "train/tokens_per_sec",
    ]:
        assert tag in s, tag
    assert [step for step, _ in s["loss/val"]] == [0, 20, 40]
    assert [step for step, _ in s["loss/val_best"]] == [20, 40]  # the best so far
    losses = [v for _, v in s["loss/train"]]
    assert len(losses) >= 39
    assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5 - 0.5  # it learns
    val = dict(s["loss/val"])
    assert abs(dict(s["val/bpc"])[40] - val[40] / 0.6931471805599453) < 1e-4


def test_generate_from_the_run_directory(trained):
    run_dir, _ = trained
    result = run_cli("generate", f"ckpt_path={run_dir}", "prompt='To be, or not '", "max_new_tokens=30", "seed=1")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("To be, or not ")
    assert len(result.stdout.rstrip("\n")) == len("To be, or not ") + 30
    assert "best.ckpt" in result.stderr
    again = run_main("generate", f"ckpt_path={run_dir}", "prompt='To be, or not '", "max_new_tokens=30", "seed=1")
    assert again.stdout == result.stdout  # a seed makes sampling reproducible, in a process or in main()


def test_generate_without_ckpt_path_uses_the_newest_run_and_says_which(trained):
    run_dir, _ = trained
    result = run_main("generate", f"paths.log_dir={run_dir.parent}", "max_new_tokens=5", "greedy=true")
    assert result.returncode == 0, result.stderr
    assert (
        f"checkpoint: the newest run: {run_dir / 'checkpoints' / 'best.ckpt'} (step 40, best val loss " in result.stderr
    )
    assert "warning: this model trained 40 step(s)" in result.stderr  # barely trained: said, not hidden


def test_evaluate_prints_exact_metrics(trained):
    run_dir, _ = trained
    result = run_cli("evaluate", f"ckpt_path={run_dir / 'checkpoints' / 'best.ckpt'}")
    assert result.returncode == 0, result.stderr
    row = next(line for line in result.stdout.splitlines() if line.startswith("val "))
    loss, bpc, ppl, acc = map(float, row.split()[1:])
    best = min(v for _, v in scalars(run_dir)["loss/val"])
    assert loss == pytest.approx(best, abs=1e-4)  # the same windows as in training
    assert bpc == pytest.approx(loss / 0.6931471805599453, abs=1e-3) and 0 < acc < 1


def test_resume_continues_from_the_saved_step(trained, tmp_path):
    run_dir, _ = trained
    copy = tmp_path / "run"
    import shutil

    shutil.copytree(run_dir, copy)
    result = run_main("train", f"ckpt_path={copy}", "trainer.max_steps=60", "sample.max_new_tokens=0")
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"resuming from {copy / 'checkpoints' / 'last.ckpt'}" in result.stdout + result.stderr
    s = scalars(copy)
    assert [step for step, _ in s["loss/val"]] == [0, 20, 40, 60]  # same run, one curve, no second step 0
    steps = [step for step, _ in s["loss/train"]]
    assert steps.count(45) == 1 and 20 not in steps[39:]  # continued at 40, not from 0


def test_without_a_terminal_progress_lines_show_and_the_log_keeps_every_printed_line(tmp_path):
    run_dir = tmp_path / "run"
    overrides = tiny_training(tmp_path, f"hydra.run.dir={run_dir}", "trainer.max_steps=20", "sample.max_new_tokens=0")
    result = run_cli("train", *overrides, "callbacks.progress_log.every_seconds=0", "trainer.val_check_interval=20")
    assert result.returncode == 0, result.stderr[-2000:]
    out = result.stdout
    assert re.search(r"^gpt: [1-9][\d,]* parameters \|", out, re.M)  # not 0.00M
    assert out.index("step      1/20") < out.index("step     10/20") < out.index("step     20 | val loss")
    log = (run_dir / "train.log").read_text()
    for line in ("step      0 | val loss", "step     10/20", "step     20 | val loss", "best val loss"):
        assert line in log, line
    watch = next(line for line in out.splitlines() if line.startswith("watch it: "))
    assert watch.endswith(f"bin/python -m src.watch {tmp_path}")  # runs without activating the venv
    assert log.splitlines()[-1] == watch  # the log is whole: the process exits without teardown, logs flushed
    assert not (run_dir / ".lock").exists()
