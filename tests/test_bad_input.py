"""Every bad input ends in one line that names the fix, a non-zero exit, and nothing written."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from src.train import main as train_main
from tests.helpers import run_cli, shakespeare_file, tiny_training


def files_under(directory: Path) -> set[Path]:
    return set(directory.rglob("*")) if directory.exists() else set()


def assert_refused(result, pattern: str) -> None:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2, result.stderr[-2000:]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr[-2000:]
    assert re.search(pattern, lines[0]), lines[0]
    assert "Traceback" not in result.stdout + result.stderr


@pytest.fixture
def workspace(tmp_path) -> Path:
    """A log dir for the run and a few broken data files beside it."""
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "latin1.txt").write_bytes("Où est le café?".encode("latin-1"))
    (tmp_path / "cache" / "tinyshakespeare").mkdir(parents=True)
    (tmp_path / "cache" / "tinyshakespeare" / "input.txt").write_text("a truncated download")
    (tmp_path / "not.ckpt").write_text("hello")
    (tmp_path / "outputs").mkdir()
    return tmp_path


TRAIN_CASES = {
    "unknown key": (["model.hidden_size=64"], r"unknown config key 'model.hidden_size'.*embedding_dim"),
    "unknown option": (["model=transformer"], r"unknown option 'transformer' for model: choose one of gpt, seed"),
    "a schema is no option": (["model=gpt_schema"], r"unknown option 'gpt_schema' for model: choose one of gpt, seed"),
    "heads do not divide": (["model.embedding_dim=64", "model.num_heads=6"], r"embedding_dim \(64\).*num_heads \(6\)"),
    "context_window 0": (["model.context_window=0"], r"context_window must be a positive integer"),
    "embedding_dim negative": (["model.embedding_dim=-8"], r"embedding_dim must be a positive integer"),
    "num_heads 0": (["model.num_heads=0"], r"num_heads must be a positive integer"),
    "num_layers 0": (["model.num_layers=0"], r"num_layers must be a positive integer"),
    "batch_size 0": (["data.batch_size=0"], r"batch_size must be a positive integer"),
    "window longer than val": (["model.context_window=50000"], r"longer than the validation split.*lower model"),
    "data file missing": (["data.path={ws}/missing.txt"], r"does not exist.*data\.path"),
    "data file empty": (["data.path={ws}/empty.txt"], r"is empty"),
    "data not UTF-8": (["data.path={ws}/latin1.txt"], r"not UTF-8"),
    "corpus checksum": (["data.path=null", "paths.data_dir={ws}/cache"], r"sha256.*delete it to download it again"),
    "no network": (
        ["data.path=null", "paths.data_dir={ws}/fresh", "data.url=http://127.0.0.1:9/input.txt"],
        r"could not download.*put the file at .*input\.txt or set data\.path",
    ),
    "checkpoint missing": (["ckpt_path={ws}/nope.ckpt"], r"does not exist"),
    "not a checkpoint": (["ckpt_path={ws}/not.ckpt"], r"is not a checkpoint"),
    "gpu without gpu": (["trainer=gpu"], r"asks for a GPU but none is available: use trainer=cpu"),
    "output not writable": (["paths.log_dir=/proc/scratchgpt-outputs"], r"cannot write the run to .*paths\.log_dir"),
}


def hide_gpus(monkeypatch) -> None:
    """This process sees no CUDA GPU and no MPS, whatever the machine has."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)


def run_in_process(monkeypatch, capsys, main, args: list[str]) -> subprocess.CompletedProcess:
    """A command's main() as the CLI runs it, for inputs it refuses (seconds faster than a process)."""
    monkeypatch.setattr(sys, "argv", ["python -m src", *args])
    with pytest.raises(SystemExit) as stopped:
        main()
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess(args, stopped.value.code, out, err)


@pytest.mark.parametrize("case", TRAIN_CASES)
def test_train_refuses_bad_input_before_writing_anything(workspace, case, monkeypatch, capsys):
    overrides, pattern = TRAIN_CASES[case]
    args = tiny_training(workspace / "outputs", *(o.format(ws=workspace) for o in overrides))
    before = files_under(workspace)
    hide_gpus(monkeypatch)  # "gpu without gpu" holds on a GPU machine too
    assert_refused(run_in_process(monkeypatch, capsys, train_main, args), pattern)
    assert files_under(workspace) == before  # no run directory, no log, no checkpoint


@pytest.mark.slow
@pytest.mark.parametrize("case", ["unknown key", "output not writable"])
def test_the_real_command_refuses_the_same_way(workspace, case):
    overrides, pattern = TRAIN_CASES[case]
    before = files_under(workspace)
    assert_refused(run_cli("train", *tiny_training(workspace / "outputs", *overrides)), pattern)
    assert files_under(workspace) == before


@pytest.mark.slow
def test_a_truncated_checkpoint_is_refused(trained, workspace):
    run_dir, _ = trained
    data = (run_dir / "checkpoints" / "last.ckpt").read_bytes()
    (workspace / "cut.ckpt").write_bytes(data[: len(data) // 2])
    for command in ("train", "generate", "evaluate"):
        args = [f"ckpt_path={workspace / 'cut.ckpt'}", f"paths.log_dir={workspace / 'outputs'}"]
        assert_refused(run_cli(command, *args), r"truncated or corrupt")


RESUME_CASES = {
    "model.embedding_dim=64": r"was trained with model\.embedding_dim=32, but the config says 64",
    "optimizer=sgd": r"was trained with optimizer=adamw, whose state it holds, but the config says optimizer=sgd",
    "trainer.max_steps=40": r"has already trained 40 steps and trainer.max_steps=40: .*set trainer.max_steps above 40",
}


@pytest.mark.slow
@pytest.mark.parametrize("override", RESUME_CASES)
def test_a_resume_that_cannot_work_is_refused_and_writes_nothing_into_the_run(
    trained, tmp_path, override, monkeypatch, capsys
):
    run_dir, _ = trained
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    before = {p: p.read_bytes() for p in files_under(copy) if p.is_file()}
    result = run_in_process(monkeypatch, capsys, train_main, [f"ckpt_path={copy}", override])
    assert_refused(result, RESUME_CASES[override])
    assert {p: p.read_bytes() for p in files_under(copy) if p.is_file()} == before  # overrides.yaml too


GENERATE_CASES = {
    "unknown characters": (["prompt='Zounds€ and ☃'"], r"2 character\(s\) not in the vocabulary: '€', '☃'"),
    "negative max_new_tokens": (["max_new_tokens=-1"], r"max_new_tokens must be a non-negative integer"),
    "negative temperature": (["temperature=-0.5"], r"temperature must be >= 0"),
    "top_k below 1": (["top_k=0"], r"top_k must be an integer >= 1"),
    "top_p above 1": (["top_p=1.5"], r"top_p must be in \(0, 1\]"),
    "top_p zero": (["top_p=0"], r"top_p must be in \(0, 1\]"),
    "unknown key": (["temprature=1"], r"unknown config key 'temprature'.*temperature"),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", GENERATE_CASES)
def test_generate_refuses_bad_arguments(trained, case):
    run_dir, _ = trained
    overrides, pattern = GENERATE_CASES[case]
    assert_refused(run_cli("generate", f"ckpt_path={run_dir}", *overrides), pattern)


@pytest.mark.slow
def test_generate_without_any_checkpoint_says_how_to_get_one(tmp_path):
    result = run_cli("generate", f"paths.log_dir={tmp_path}")
    assert_refused(result, r"no checkpoint under .*python -m src\.train")


def test_the_shared_corpus_is_the_real_one():
    assert shakespeare_file().stat().st_size == 1_115_394


@pytest.mark.slow
def test_help_lists_each_command_s_own_groups_and_options_and_no_schemas():
    train = run_cli("train", "--help")
    assert train.returncode == 0, train.stderr
    assert re.search(r"^  model +gpt, seed$", train.stdout, re.M)
    assert re.search(r"^  experiment +cpu_speedrun, nanogpt_cpu, nanogpt_gpu, notes_recipe$", train.stdout, re.M)
    assert "_schema" not in train.stdout and "model.num_heads" not in train.stdout  # keys show as YAML
    generate = run_cli("generate", "--help")
    assert generate.returncode == 0, generate.stderr
    assert "max_new_tokens: 500" in generate.stdout
    assert not re.search(r"^\s*(model|optimizer|trainer)\b", generate.stdout, re.M)  # not the training groups


def test_a_sweep_point_choosing_a_schema_is_refused_up_front(workspace, monkeypatch, capsys):
    args = ["-m", *tiny_training(workspace / "outputs", "model=gpt,seed_schema")]
    before = files_under(workspace)
    result = run_in_process(monkeypatch, capsys, train_main, args)
    assert_refused(result, r"job 1 \(.*model=seed_schema.*\): unknown option 'seed_schema' for model")
    assert files_under(workspace) == before
