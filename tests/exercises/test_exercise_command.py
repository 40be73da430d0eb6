"""`python -m src.exercises` (make exercise, exercise-reset, check-exercise, train-exercise): what it writes,
what it keeps, and what it refuses, in one line with exit status 2, never touching src/."""

from __future__ import annotations

import hashlib
import re
import subprocess
import sys
import time

import pytest

from src.exercises import EXERCISES, source, write
from src.exercises import __main__ as exercises_main
from src.exercises.__main__ import main
from tests.helpers import ROOT, run_main, tiny_training


def src_hashes() -> dict[str, str]:
    files = [p for p in sorted((ROOT / "src").rglob("*")) if p.is_file() and "__pycache__" not in p.parts]
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


@pytest.fixture
def mine(tmp_path, monkeypatch):
    folder = tmp_path / "mine"
    monkeypatch.setenv("SCRATCHGPT_EXERCISES_DIR", str(folder))
    before = src_hashes()
    yield folder
    assert src_hashes() == before


@pytest.mark.parametrize("command", ["start", "check", "train", "reset"])
def test_an_unknown_exercise_is_refused_in_one_line(command, mine, capsys):
    assert main([command, "flash_attention"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert err.startswith("error: unknown exercise 'flash_attention': choose one of causal_mask, softmax, attention")
    assert not mine.exists()


def test_the_command_as_a_learner_types_it_refuses_an_unknown_name(mine):
    result = subprocess.run(
        [sys.executable, "-m", "src.exercises", "start", "flash"], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 2 and result.stdout == "" and "Traceback" not in result.stderr
    assert result.stderr == (
        "error: unknown exercise 'flash': choose one of causal_mask, softmax, attention, heads, layer_norm, "
        "cross_entropy, positions, kv_cache\n"
    )


def test_start_writes_the_blank_keeps_the_learners_work_and_reset_starts_again(mine, capsys):
    assert main(["start", "attention"]) == 0
    path = mine / "attention.py"
    blank = path.read_text()
    assert blank == source("attention")
    assert "scores  = Q K^T / sqrt(d_k)" in blank and "raise NotImplementedError(" in blank
    assert "weights = softmax(scores" not in blank.split('"""')[-1]  # the body is gone, the formula stays
    path.write_text(blank.replace("raise NotImplementedError(", "return Q, K  # mine\n    raise NotImplementedError("))
    mine_now = path.read_text()
    assert main(["start", "attention"]) == 0 and path.read_text() == mine_now  # never overwritten
    assert "is there (your work, kept)" in capsys.readouterr().out
    assert main(["reset", "attention"]) == 0
    assert path.read_text() == blank and (mine / "attention.py.old").read_text() == mine_now


def test_check_and_train_need_the_exercise_started(mine, capsys):
    for command in ("check", "train"):
        assert main([command, "softmax"]) == 2
        assert "softmax.py does not exist: start the exercise: make exercise NAME=softmax" in capsys.readouterr().err


def test_no_name_lists_the_exercises(mine, capsys):
    assert main([]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in EXERCISES)
    assert main(["start"]) == 2
    assert "start needs an exercise name" in capsys.readouterr().err


def test_docs_learn_quotes_the_tests_each_exercise_lists(mine, capsys):
    """Issue 47: docs/learn.md said 5/3/2/2 tests where 6/4/4/5 ran."""
    table = dict(re.findall(r"^\| `(\w+)` \|.*\| (\d+) \|$", (ROOT / "docs" / "learn.md").read_text(), re.M))
    assert main([]) == 0
    listed = dict(re.findall(r"^  (\w+) .* (\d+) tests", capsys.readouterr().out, re.M))
    assert table == listed == {name: str(len(ex.tests)) for name, ex in EXERCISES.items()}


def test_every_blank_and_every_solution_is_python_that_loads(mine):
    for name in EXERCISES:
        for solution in (False, True):
            compile(source(name, solution), f"{name}.py", "exec")


def test_the_learners_folder_is_ignored_by_git():
    ignored = subprocess.run(["git", "check-ignore", "-q", "exercises/attention.py"], cwd=ROOT)
    assert ignored.returncode == 0


@pytest.mark.slow  # four tiny trainings, processes the command starts
def test_train_exercise_compares_the_learners_run_with_the_reference(mine, tmp_path):
    """make train-exercise NAME=attention: with the reference's code in the learner's file both runs
    end at the same val loss; with the blank, the learner's run stops naming the notes' step."""
    tiny = [a for a in tiny_training(tmp_path / "runs") if not a.startswith("model.num_layers")]  # model=seed

    def train() -> subprocess.CompletedProcess:
        return run_main("exercises", "train", "attention", *tiny)  # main(), in this process

    write("attention", solution=True)
    result = train()
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    losses = re.search(r"best val loss: yours (\S+), the reference (\S+)\n", result.stdout)
    assert losses and losses.group(1) == losses.group(2), result.stdout
    assert "the same to 1e-6: your code computes what the reference computes" in result.stdout
    assert len(list((tmp_path / "runs" / "exercises").glob("attention_*/*/result.json"))) == 2
    write("attention")
    result = train()
    assert result.returncode != 0
    assert "NotImplementedError: exercise attention, the notes' step 'scaled dot-product attention'" in result.stderr


@pytest.mark.parametrize(
    "broken, said",
    [
        ("def oops(:\n", "SyntaxError"),
        ("import sys\nsys.exit(0)\n", "SystemExit: 0"),
        ("raise RuntimeError('mine')\n", "RuntimeError: mine"),
        ("while True:\n    pass\n", "still loading after 1 s: an endless loop outside a function?"),
    ],
)
def test_check_names_a_file_that_does_not_load_in_one_line(broken, said, mine, capsys, monkeypatch):
    """Issue 48: a syntax error or sys.exit in the learner's file was pytest's 25-line INTERNALERROR; an
    endless loop was a check that printed nothing and never ended."""
    monkeypatch.setattr(exercises_main, "LOAD_SECONDS", 1)
    assert main(["start", "softmax"]) == 0
    path = mine / "softmax.py"
    path.write_text(path.read_text() + "\n" + broken)
    capsys.readouterr()
    assert main(["check", "softmax"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and err.startswith("error: ") and said in err, err
    assert "softmax.py does not load" in err and "make exercise-reset NAME=softmax" in err


@pytest.mark.slow
def test_check_stops_tests_that_never_end_in_one_line(mine, capfd, monkeypatch):
    monkeypatch.setattr(exercises_main, "CHECK_SECONDS", 20)
    assert main(["start", "softmax"]) == 0
    path = mine / "softmax.py"
    path.write_text(
        path.read_text().replace(
            "raise NotImplementedError(", "while True:\n        pass\n    raise NotImplementedError("
        )
    )
    started = time.monotonic()
    assert main(["check", "softmax"]) == 2
    assert time.monotonic() - started < 40
    err = capfd.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: exercise softmax: its tests were stopped after 20 s"), err
