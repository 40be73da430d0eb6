"""Each exercise against the project's own tests: its blank fails exactly the tests mapped to it, each
failure naming the notes' step; the reference's own code, copied in, passes them."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from src.exercises import EXERCISES, write
from src.exercises.__main__ import mapped_tests
from tests.helpers import ROOT, run_main


def check(name: str, folder, monkeypatch) -> subprocess.CompletedProcess:
    """`python -m src.exercises check <name>` on the learner's files in `folder`: its main(), in this process
    (the grading pytest it starts is a process of its own; test_exercise_command.py runs the command line)."""
    monkeypatch.setenv("SCRATCHGPT_EXERCISES_DIR", str(folder))
    return run_main("exercises", "check", name)


def test_every_exercise_names_tests_that_exist():
    for name, ex in EXERCISES.items():
        nodes = mapped_tests(name)
        assert len(nodes) == len(ex.tests) >= 1
        for node in nodes:
            path, function = node.split("::")
            assert re.search(rf"^def {function}\(", (ROOT / path).read_text(), re.M), f"{name}: {node} is gone"


@pytest.mark.slow  # a pytest process per exercise
@pytest.mark.parametrize("name", list(EXERCISES))
def test_the_blank_fails_exactly_its_tests_and_names_the_notes_step(name, tmp_path, monkeypatch):
    monkeypatch.setenv("SCRATCHGPT_EXERCISES_DIR", str(tmp_path))
    write(name)
    result = check(name, tmp_path, monkeypatch)
    out = result.stdout
    assert result.returncode == 1, out[-3000:] + result.stderr[-2000:]
    failed = re.findall(r"^FAILED (\S+)", out, re.M)
    collected = int(re.search(r"(\d+) failed", out).group(1))
    assert " passed" not in out.splitlines()[-1] and len(failed) == collected  # every mapped test fails ...
    mapped = {node.split("/")[-1] for node in mapped_tests(name)}
    assert {f.split("/")[-1].split("[")[0] for f in failed} == mapped  # ... and only those
    step = EXERCISES[name].step
    assert out.count(f"exercise {name}: the notes' step '{step}' is not right yet.") == 1  # the notes once
    assert f"NotImplementedError: exercise {name}, the notes' step '{step}': write this body" in out


@pytest.mark.slow
def test_every_reference_solution_copied_in_passes_its_tests(tmp_path, monkeypatch):
    """All eight at once, in one pytest process: each exercise's tests pass with the reference's code."""
    monkeypatch.setenv("SCRATCHGPT_EXERCISES_DIR", str(tmp_path))
    for name in EXERCISES:
        write(name, solution=True)
    nodes = sorted({node for name in EXERCISES for node in mapped_tests(name)})
    env = {**os.environ, "SCRATCHGPT_EXERCISES_DIR": str(tmp_path), "SCRATCHGPT_EXERCISES": ",".join(EXERCISES)}
    command = [sys.executable, "-m", "pytest", "-p", "src.exercises.grading", "-o", "addopts=", "-q", *nodes]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    for name, ex in EXERCISES.items():
        summary = rf"^exercise {name}: all (\d+) tests of the notes' step '{ex.step}' pass"
        passed = re.search(summary, result.stdout, re.M)
        assert passed and int(passed.group(1)) == len(ex.tests), result.stdout[-3000:]  # as the catalogue lists
