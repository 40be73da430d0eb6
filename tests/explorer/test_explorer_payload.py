"""What the page carries of a run's head scores: every step's scores, and maps within a budget."""

from __future__ import annotations

import json
from pathlib import Path

from src.explorer.payload import run_title, thin_maps


def snapshots(count: int, map_bytes: int) -> list[dict]:
    return [{"step": 10 * k, "scores": {"induction": [[k]]}, "maps": {"probe": "x" * map_bytes}} for k in range(count)]


def test_maps_are_thinned_to_the_budget_and_every_score_kept():
    cases = [(5, 10_000, [0, 1, 2, 3, 4]), (21, 5 * 120, [0, 5, 10, 15, 20]), (9, 130, [8]), (9, 50, [])]
    for count, budget, kept in cases:
        thinned = thin_maps(snapshots(count, 100), budget)
        assert [s["scores"]["induction"][0][0] for s in thinned] == list(range(count))  # every step's scores
        assert [k for k, s in enumerate(thinned) if s["maps"] is not None] == kept
        assert sum(len(json.dumps(s["maps"])) for s in thinned if s["maps"]) <= budget


def test_the_title_names_the_runs_date():
    assert run_title(Path("outputs/2026-11-24/23-28-30")) == "2026-11-24 23-28-30"
    assert run_title(Path("outputs/multirun/2026-11-24/23-28-30/3")) == "2026-11-24 23-28-30 job 3"
    assert run_title(Path("/tmp/elsewhere/run")) == "run"
