"""Is a difference real, and what is it worth? Compare configurations over seeds: mean, spread, Welch's
t-test, and the compute multiplier.

    python -m src.compare outputs/multirun/2026-11-25/01-02-03            # one sweep, grouped by configuration
    python -m src.compare RUN_DIR RUN_DIR ... SWEEP_DIR --target 1.88     # any runs and sweeps together

Runs are grouped by configuration (src/sweeps/analysis.configuration); the first group, or the one
--baseline names, is the baseline. --target adds the speedrun's rule, a one-sided t-test that the mean
is below it (modded-nanogpt asks p < 0.01). A group of one run, and runs of different texts or
validation splits, are refused (docs/sweeps.md). The tests are scipy.stats's.

The compute multiplier of a group B over the baseline A at a loss L (nanochat's scripts/compare.py): the
compute A needs to reach L over the compute B needs, C_A(L) / C_B(L); 2 means B reaches L with half the
FLOPs. C_run(L) is read off the run's validations (result.json's val_curve, C = FLOPs per token x tokens
per step x step), interpolated piecewise-linearly in (log C, log loss) on its best-so-far curve. L is
--at-loss, else the highest best val loss of the two groups' runs (one every run reached); a run that
never reached L is extrapolated along its last segment, and the multiplier marked *. Its spread over seeds:
exp of the 95 % Welch interval of mean log C_A - mean log C_B.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from src.sweeps.analysis import configuration, finite_loss

DATA_KEYS = ("path", "val_fraction", "test_fraction", "val_tokens")  # what a comparable val loss depends on


class Refused(ValueError):
    """Input the comparison cannot use; the message names the fix."""


def welch(a: list[float], b: list[float]) -> tuple[float, float, float]:
    """Welch's t-test of mean(a) == mean(b): (t, degrees of freedom, two-sided p-value)."""
    from scipy import stats

    if statistics.variance(a) + statistics.variance(b) == 0.0:  # no spread (one seed rerun): scipy says nan
        difference = statistics.fmean(a) - statistics.fmean(b)
        return (math.copysign(math.inf, difference) if difference else math.nan), math.nan, float(difference == 0)
    result = stats.ttest_ind(a, b, equal_var=False)
    return float(result.statistic), float(result.df), float(result.pvalue)


def below_target(values: list[float], target: float) -> float:
    """One-sided p-value of a t-test that the mean of `values` is below `target`."""
    from scipy import stats

    if statistics.stdev(values) == 0.0:  # no spread: below or not, for certain
        return 0.0 if statistics.fmean(values) < target else 1.0
    return float(stats.ttest_1samp(values, target, alternative="less").pvalue)


@dataclass
class Run:
    path: Path
    configuration: tuple[str, ...]
    value: float
    data: tuple
    curve: list[tuple[float, float]] | None = None  # (training FLOPs, val loss) at each validation; None: unknown


def compute_curve(row: dict) -> list[tuple[float, float]] | None:
    """(FLOPs, val loss) of each validation after step 0, from result.json (runs before issue 46: None)."""
    curve, per_token, tokens, steps = (row.get(k) for k in ("val_curve", "flops_per_token", "tokens", "steps"))
    if not curve or not per_token or not tokens or not steps:
        return None
    per_step = per_token * tokens / steps
    return [(per_step * step, loss) for step, loss in curve if step > 0 and math.isfinite(loss)] or None


def compute_to_reach(curve: list[tuple[float, float]], loss: float) -> tuple[float, bool]:
    """(the FLOPs at which the run's best-so-far val loss first reaches `loss`, extrapolated or not):
    piecewise-linear in (log C, log loss); past the last validation, the last segment extended (inf where
    it does not go down)."""
    best, points = math.inf, []
    for flops, value in curve:
        best = min(best, value)
        points.append((math.log(flops), math.log(best)))
    target = math.log(loss)
    if points[0][1] <= target:
        return math.exp(points[0][0]), False  # reached at the first validation (no earlier point to read)
    for (x0, y0), (x1, y1) in zip(points, points[1:], strict=False):
        if y1 <= target:
            return math.exp(x0 + (target - y0) * (x1 - x0) / (y1 - y0)), False
    if len(points) < 2 or points[-1][1] >= points[-2][1]:
        return math.inf, True
    (x0, y0), (x1, y1) = points[-2:]
    return math.exp(x1 + (target - y1) * (x1 - x0) / (y1 - y0)), True


@dataclass
class Multiplier:
    """C_A(L) / C_B(L) of the groups' geometric means, its 95 % interval, whether any run was extrapolated."""

    value: float
    low: float
    high: float
    extrapolated: bool
    loss: float

    def cell(self) -> str:
        if math.isinf(self.value):
            return f"never reached {self.loss:.4f}"
        mark = "*" if self.extrapolated else ""
        return f"{self.value:.3g}{mark} [{self.low:.3g}, {self.high:.3g}] at {self.loss:.4f}"


def compute_multiplier(baseline: list[Run], variant: list[Run], at_loss: float | None = None) -> Multiplier | None:
    """The compute multiplier of `variant` over `baseline` at `at_loss` (default: the highest best val loss
    of their runs); None when a run has no curve."""
    runs = baseline + variant
    if any(run.curve is None for run in runs):
        return None
    loss = at_loss if at_loss is not None else max(run.value for run in runs)
    reached = {id(run): compute_to_reach(run.curve, loss) for run in runs}
    extrapolated = any(reached[id(run)][1] for run in runs)
    if any(not math.isfinite(reached[id(run)][0]) for run in runs):
        return Multiplier(math.inf, math.inf, math.inf, True, loss)
    logs = [[math.log(reached[id(run)][0]) for run in group] for group in (baseline, variant)]
    difference = statistics.fmean(logs[0]) - statistics.fmean(logs[1])
    low, high = welch_interval(logs[0], logs[1])
    return Multiplier(math.exp(difference), math.exp(low), math.exp(high), extrapolated, loss)


def welch_interval(a: list[float], b: list[float], confidence: float = 0.95) -> tuple[float, float]:
    """The confidence interval of mean(a) - mean(b) with Welch's degrees of freedom (scipy.stats's t)."""
    from scipy import stats

    difference = statistics.fmean(a) - statistics.fmean(b)
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    if va + vb == 0.0:
        return difference, difference
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    half = float(stats.t.ppf(0.5 + confidence / 2, df)) * math.sqrt(va + vb)
    return difference - half, difference + half


def data_of(run_dir: Path) -> tuple:
    """The text and validation split of a run, from its composed config (.hydra/config.yaml)."""
    import yaml

    config = run_dir / ".hydra" / "config.yaml"
    if not config.is_file():
        raise Refused(f"{run_dir} has no .hydra/config.yaml: give the directories that training wrote")
    data = (yaml.safe_load(config.read_text(encoding="utf-8")) or {}).get("data") or {}
    return tuple((key, data.get(key)) for key in DATA_KEYS)


def find_runs(directories: list[Path], metric: str) -> list[Run]:
    runs = []
    for directory in directories:
        if not directory.is_dir():
            raise Refused(f"{directory} is not a directory: give run or sweep directories")
        results = [directory / "result.json"] if (directory / "result.json").is_file() else []
        results = results or sorted(directory.rglob("result.json"))
        if not results:
            raise Refused(f"{directory} holds no result.json: give the directories of finished runs or sweeps")
        for result in results:
            row = json.loads(result.read_text(encoding="utf-8"))
            value = finite_loss(row, metric)
            if value is not None:  # a failed or unfinished run has no number to compare
                overrides = configuration(row.get("overrides", []))
                runs.append(Run(result.parent, overrides, value, data_of(result.parent), compute_curve(row)))
    return runs


def groups_of(runs: list[Run]) -> dict[tuple[str, ...], list[Run]]:
    groups: dict[tuple[str, ...], list[Run]] = {}
    for run in runs:
        groups.setdefault(run.configuration, []).append(run)
    a = runs[0] if runs else None
    b = next((run for run in runs if run.data != a.data), None) if a else None
    if a is not None and b is not None:  # the first run whose text or split differs from the first run's
        key, x, y = next((k, x, y) for (k, x), (_, y) in zip(a.data, b.data, strict=True) if x != y)
        raise Refused(
            f"{a.path} and {b.path} differ in data.{key} ({x} vs {y}): "
            f"losses on different texts or validation splits are not comparable"
        )
    for key, members in groups.items():
        if len(members) < 2:
            raise Refused(
                f"the group {label(key)} has {len(members)} finished run ({members[0].path}): "
                f"a spread needs at least 2 seeds; run more seeds (seed=1,2,3) or leave it out"
            )
    return groups


def label(configuration: tuple[str, ...]) -> str:
    return " ".join(configuration) or "(defaults)"


def report(
    groups: dict[tuple[str, ...], list[Run]],
    baseline: str | None,
    target: float | None,
    metric: str,
    at_loss: float | None = None,
) -> str:
    keys = list(groups)
    if baseline is not None:
        chosen = [k for k in keys if baseline in label(k)]
        if len(chosen) != 1:
            raise Refused(
                f"--baseline {baseline!r} matches {len(chosen)} groups: give text found in exactly one of "
                + ", ".join(repr(label(k)) for k in keys)
            )
        keys.remove(chosen[0])
        keys.insert(0, chosen[0])
    base = [r.value for r in groups[keys[0]]]
    lines = [
        f"{metric} by configuration (baseline: {label(keys[0])}); p: Welch's two-sided t-test against the baseline; "
        f"compute multiplier: the baseline's FLOPs to reach the loss over the group's [95 % interval over seeds] "
        f"(* extrapolated)",
        "",
        "| configuration | runs | mean | std | min | max | mean - baseline | p | compute multiplier |"
        + (f" below {target}: p (one-sided) |" if target is not None else ""),
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |" + (" --- |" if target is not None else ""),
    ]
    for i, key in enumerate(keys):
        values = [r.value for r in groups[key]]
        mean, std = statistics.fmean(values), statistics.stdev(values)
        if i == 0:
            versus = "| - | - | - |"
        else:
            _, _, p = welch(values, base)
            multiplier = compute_multiplier(groups[keys[0]], groups[key], at_loss)
            worth = multiplier.cell() if multiplier is not None else "- (no val_curve in result.json)"
            versus = f"| {mean - statistics.fmean(base):+.4f} | {p:.3g} | {worth} |"
        spread = f"{mean:.4f} | {std:.4f} | {min(values):.4f} | {max(values):.4f}"
        row = f"| {label(key)} | {len(values)} | {spread} {versus}"
        if target is not None:
            p_target = below_target(values, target)
            verdict = "yes" if p_target < 0.01 else "not shown"
            row += f" {verdict}: {p_target:.3g} |"
        lines.append(row)
    return "\n".join(lines)


def refuse(message: str) -> NoReturn:
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m src.compare", description=__doc__.split("\n\n")[0])
    parser.add_argument("directories", nargs="+", type=Path, help="run directories and sweep directories")
    parser.add_argument("--target", type=float, help="the speedrun's target: is each group's mean below it?")
    parser.add_argument("--baseline", help="text in the label of the group the others are compared with")
    parser.add_argument("--metric", default="best_val_loss", help="a number of result.json (best_val_loss)")
    parser.add_argument("--at-loss", type=float, help="the val loss the compute multiplier is read at")
    args = parser.parse_args(argv)
    if args.target is not None and not math.isfinite(args.target):
        refuse(f"--target must be a finite number, got {args.target}")
    if args.at_loss is not None and not (math.isfinite(args.at_loss) and args.at_loss > 0):
        refuse(f"--at-loss must be a positive val loss, got {args.at_loss}")
    try:
        groups = groups_of(find_runs(args.directories, args.metric))
        if not groups:
            raise Refused(f"no finished run with a finite {args.metric} under {', '.join(map(str, args.directories))}")
        print(report(groups, args.baseline, args.target, args.metric, args.at_loss))
    except (Refused, OSError, json.JSONDecodeError) as err:
        refuse(" ".join(str(err).split()))


if __name__ == "__main__":
    main()
