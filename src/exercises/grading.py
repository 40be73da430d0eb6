"""A pytest plugin (`pytest -p src.exercises.grading`): the project's tests run against the learner's
version of the exercises SCRATCHGPT_EXERCISES names, and a failure says which step of the notes it
is; the summary gives the notes' formula once per exercise and says what to do next."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from src.exercises import EXERCISES, Exercise, learner_file, restore, use_selected

_chosen: list[Exercise] = []
_failed: dict[str, list[tuple[str, str, str]]] = {}  # exercise -> [(catalogue's test, node id, first error line)]
_passed: dict[str, set[str]] = {}  # exercise -> the catalogue's tests with a case that passed


def pytest_configure(config: pytest.Config) -> None:
    """Before any test module is collected, so that `from src.model... import X` in them gets yours."""
    _failed.clear()
    _passed.clear()
    _chosen[:] = [EXERCISES[n] for n in use_selected()]


def pytest_unconfigure(config: pytest.Config) -> None:
    """The reference back: a grading run inside a longer process (tests/exercises/test_mutants.py) ends clean."""
    restore()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[Any]:
    outcome = yield
    report = outcome.get_result()
    file, _, rest = item.nodeid.partition("::")
    test = f"{file.rsplit('/', 1)[-1]}::{rest.split('[')[0]}"  # as the catalogue names it: basename::function
    for ex in [ex for ex in _chosen if test in ex.tests]:
        if report.failed:
            message = call.excinfo.exconly().splitlines()[0] if call.excinfo else "failed"
            _failed.setdefault(ex.name, []).append((test, item.nodeid, message))
        elif report.when == "call" and report.passed:
            _passed.setdefault(ex.name, set()).add(test)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Counted as the catalogue counts (`python -m src.exercises`, docs/learn.md): a test with several
    cases (pytest's parametrize) is one test, passed when every case of it that ran passed."""
    for ex in _chosen:
        failed = _failed.get(ex.name, [])
        failing = set(test for test, _, _ in failed)
        passed = len(_passed.get(ex.name, set()) - failing)
        write = terminalreporter.write_line
        write("")
        if failed or not passed:
            where = f"exercise {ex.name} ({learner_file(ex.name)})"
            write(f"{where}: {len(failing)} test(s) fail at the notes' step '{ex.step}', {passed} pass:")
            for _, nodeid, _ in failed:
                write(f"  {nodeid.rsplit('/', 1)[-1]}")
            for message in dict.fromkeys(message for _, _, message in failed):  # each error once
                write(f"  {message[:300]}")
            write(f"exercise {ex.name}: the notes' step '{ex.step}' is not right yet.")
            write("")
            for line in ex.notes.splitlines():
                write(f"  {line}" if line else "")
            write("")
            write(f"the notes' formula is also in the docstring; run again: make check-exercise NAME={ex.name}")
        else:
            write(f"exercise {ex.name}: all {passed} tests of the notes' step '{ex.step}' pass with your code.")
            write(f"Now train the model with it and compare with the reference: make train-exercise NAME={ex.name}")
