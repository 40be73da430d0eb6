"""python -m src.compare: its table groups runs by configuration, its p-values are scipy.stats's t-tests,
and it refuses what cannot be compared in one line."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from scipy import stats

from tests.helpers import run_cli, run_main

FIXED = {  # best val losses of three configurations, 3 to 5 seeds, spreads far apart
    "a": [1.8812, 1.8790, 1.8843, 1.8771],
    "b": [1.8601, 1.8655, 1.8629],
    "c": [1.8820, 1.8519, 1.9102, 1.8733, 1.8688],
}


def fake_run(
    root: Path, name: str, loss: float, overrides: list[str], data_path: str | None = None, curve: list | None = None
) -> Path:
    """A run directory as training leaves it, as far as the comparison reads it; curve: its (step, val loss)."""
    run = root / name
    (run / ".hydra").mkdir(parents=True)
    data = {"path": data_path, "val_fraction": 0.1, "test_fraction": 0.0, "val_tokens": 120000, "batch_size": 32}
    (run / ".hydra" / "config.yaml").write_text(yaml.safe_dump({"data": data, "seed": 1}))
    result = {"overrides": overrides, "status": "ok", "best_val_loss": loss, "steps": 10}
    if curve is not None:  # 1,000 FLOPs per token, 100 tokens per step: 1e5 FLOPs a step
        result |= {"val_curve": curve, "steps": curve[-1][0], "tokens": 100 * curve[-1][0], "flops_per_token": 1000}
    (run / "result.json").write_text(json.dumps(result))
    return run


def sweep(root: Path, groups: dict[str, list[float]], key: str = "model.norm") -> Path:
    """A sweep directory whose numbered jobs vary `key` over the groups and the seed."""
    job = 0
    for value, losses in groups.items():
        for seed, loss in enumerate(losses):
            fake_run(root, str(job), loss, [f"{key}={value}", f"seed={seed}", f"paths.log_dir={root}"])
            job += 1
    return root


def table_rows(stdout: str) -> dict[str, list[str]]:
    rows = [line.strip("|").split("|") for line in stdout.splitlines() if line.startswith("| ") and "---" not in line]
    return {cells[0].strip(): [c.strip() for c in cells[1:]] for cells in rows[1:]}


def test_a_sweep_is_grouped_by_configuration_and_compared_with_the_baseline(tmp_path):
    root = sweep(tmp_path / "multirun", {"layer": FIXED["a"], "rms": FIXED["b"]})
    result = run_cli("compare", str(root), "--target", "1.88")  # the command line, once; main() below
    assert result.returncode == 0, result.stderr
    rows = table_rows(result.stdout)
    assert list(rows) == ["model.norm=layer", "model.norm=rms"]  # the seeds and output paths do not split groups
    runs, mean, std = rows["model.norm=rms"][:3]
    assert (runs, mean, std) == ("3", "1.8628", "0.0027")
    p = stats.ttest_ind(FIXED["b"], FIXED["a"], equal_var=False).pvalue
    assert rows["model.norm=rms"][5:7] == [f"{1.8628333 - 1.8804:+.4f}", f"{p:.3g}"]
    assert p < 0.001
    assert rows["model.norm=rms"][8] == f"yes: {stats.ttest_1samp(FIXED['b'], 1.88, alternative='less').pvalue:.3g}"
    assert rows["model.norm=layer"][8].startswith("not shown: ")  # mean 1.8804, not below 1.88


def test_runs_and_sweeps_mix_and_the_baseline_can_be_chosen(tmp_path):
    root = sweep(tmp_path / "sweep", {"rms": FIXED["b"]})
    singles = [fake_run(tmp_path / "runs", f"r{i}", loss, [f"seed={i}"]) for i, loss in enumerate(FIXED["c"])]
    result = run_main("compare", str(root), *map(str, singles), "--baseline", "defaults")
    assert result.returncode == 0, result.stderr
    rows = table_rows(result.stdout)
    assert list(rows) == ["(defaults)", "model.norm=rms"]
    assert rows["(defaults)"][0] == "5"
    assert re.search(r"baseline: \(defaults\)", result.stdout)


@pytest.mark.parametrize(
    "case,pattern",
    [
        ("one run", r"the group model.norm=rms has 1 finished run .*at least 2 seeds"),
        ("another text", r"differ in data.path \(None vs .*other.txt\): losses on different texts"),
        ("another split", r"differ in data.val_fraction"),
        ("no runs", r"holds no result.json"),
        ("missing", r"is not a directory"),
        ("ambiguous baseline", r"--baseline 'model' matches 2 groups"),
    ],
)
def test_what_cannot_be_compared_is_refused_in_one_line(tmp_path, case, pattern):
    root = sweep(tmp_path / "sweep", {"layer": FIXED["a"], "rms": FIXED["b"][:1] if case == "one run" else FIXED["b"]})
    args = [str(root)]
    if case == "another text":
        args += [str(fake_run(tmp_path / "x", f"r{i}", 1.9, [f"seed={i}"], "/data/other.txt")) for i in range(2)]
    if case == "another split":
        config = root / "0" / ".hydra" / "config.yaml"
        config.write_text(config.read_text().replace("val_fraction: 0.1", "val_fraction: 0.2"))
    if case == "no runs":
        (tmp_path / "empty").mkdir()
        args = [str(tmp_path / "empty")]
    if case == "missing":
        args = [str(tmp_path / "nowhere")]
    if case == "ambiguous baseline":
        args += ["--baseline", "model"]
    result = run_main("compare", *args)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert re.search(pattern, lines[0]), lines[0]
    assert result.stdout == ""


def test_runs_without_spread_get_a_certain_answer_not_nan():
    """Reruns of one seed give equal losses: scipy's t-test divides 0 by 0 there."""
    from src.compare import below_target, welch

    assert welch([1.5, 1.5], [1.5, 1.5])[2] == 1.0 and welch([1.5, 1.5], [1.7, 1.7])[2] == 0.0
    assert below_target([1.5, 1.5], 1.88) == 0.0 and below_target([1.9, 1.9], 1.88) == 1.0


def loss_at(step: float, seed: int) -> float:
    """A synthetic val loss curve: a power law in the steps, a little different per seed."""
    return 1.4 + (2.8 + 0.05 * seed) * (step / 10) ** -0.35


def curve_sweep(root: Path, key: str, speedup: dict[str, float], seeds: int = 3) -> Path:
    """Jobs of `key=value` over seeds whose validations see the baseline's losses at 1/speedup[value] of its steps."""
    job = 0
    for value, faster in speedup.items():
        for seed in range(seeds):
            curve = [[int(step / faster), loss_at(step, seed)] for step in range(10, 210, 10)]
            overrides = [f"{key}={value}", f"seed={seed}"]
            fake_run(root, str(job), min(loss for _, loss in curve), overrides, curve=curve)
            job += 1
    return root


def test_the_compute_multiplier_of_a_set_against_itself_is_one_and_against_twice_as_fast_two(tmp_path):
    from src.compare import compute_multiplier, find_runs, groups_of

    root = curve_sweep(tmp_path / "sweep", "model.norm", {"layer": 1.0, "rms": 2.0})
    groups = list(groups_of(find_runs([root], "best_val_loss")).values())
    itself = compute_multiplier(groups[0], groups[0])
    assert itself.value == pytest.approx(1.0) and not itself.extrapolated
    twice = compute_multiplier(groups[0], groups[1])  # rms reaches every loss in half the steps
    assert twice.value == pytest.approx(2.0) and twice.low <= 2.0 <= twice.high and not twice.extrapolated
    assert compute_multiplier(groups[1], groups[0]).value == pytest.approx(0.5)
    lower = compute_multiplier(groups[0], groups[1], at_loss=1.6)  # below the baseline's last validation
    assert lower.extrapolated and lower.value == pytest.approx(2.0, rel=0.05)


def test_the_compute_multiplier_column_marks_an_extrapolated_value(tmp_path):
    root = curve_sweep(tmp_path / "sweep", "model.norm", {"layer": 1.0, "rms": 2.0})
    rows = table_rows(run_main("compare", str(root)).stdout)
    assert rows["model.norm=rms"][7].startswith("2 [") and rows["model.norm=layer"][7] == "-"
    rows = table_rows(run_main("compare", str(root), "--at-loss", "1.6").stdout)
    assert re.match(r"2(\.0\d*)?\* \[", rows["model.norm=rms"][7]) and rows["model.norm=rms"][7].endswith("at 1.6000")
