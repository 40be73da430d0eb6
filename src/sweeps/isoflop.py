"""isoFLOP curves (Hoffmann et al. 2022, approach 2): the jobs of a sweep over budgets (trainer.flops) and
sizes (model.scale), and seeds. Per budget C and seed, a parabola in log N through the best swept size and
its two neighbours,

    L(N) = a (log N)^2 + b log N + c,     N_opt(C) = exp(-b / 2a)   (a > 0: a minimum)

A parabola describes an isoFLOP curve near its minimum only: far from it a small budget's largest models
take a few dozen steps and sit on the unigram plateau (~3.35 nats on Tiny Shakespeare), which bends a
parabola fitted to every size (docs/results.md, "isoFLOP"). A budget whose best size is the smallest or
the largest swept has its minimum outside the sweep: it is left out, and said so.

D_opt(C) is the tokens a model of N_opt trains on within C (log D against log N, linear over the budget's
jobs, read at N_opt). Across the fitted budgets, N_opt ~ C^alpha and D_opt ~ C^beta (least squares in
log-log). Each number is fitted per seed, then given as the seeds' mean with a 95 % t-interval
(mean +- t(0.975, n-1) s / sqrt(n)): the spread a rerun with other seeds would show. All three under each
parameter count of src/training/flops.py (all, non_embedding, transformer), which move the exponents
(nanochat's dev/LOG.md, 2026-01-27)."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from src.sweeps.analysis import finite_loss

COUNTS = ("all", "non_embedding", "transformer")
MIN_SIZES = 3  # a parabola has three free numbers


class IsoFlopRefused(ValueError):
    """Jobs an isoFLOP fit cannot use; the message names the budget and the fix."""


def override(row: dict[str, Any], key: str) -> str | None:
    given = dict(o.lstrip("+").split("=", 1) for o in row.get("overrides", []) if "=" in o)
    return given.get(key)


def is_isoflop(rows: list[dict[str, Any]]) -> bool:
    """Whether the sweep ran more than one budget (trainer.flops): then summary.md has an isoFLOP section."""
    return len({override(row, "trainer.flops") for row in rows} - {None}) > 1


@dataclass
class Parabola:
    """L = a x^2 + b x + c in x = log N; the minimum at x = -b / 2a."""

    a: float
    b: float
    c: float
    low: float = 0.0  # the sizes it was fitted between
    high: float = 0.0

    @property
    def x_min(self) -> float:
        return -self.b / (2 * self.a)

    def __call__(self, x: Any) -> Any:
        return self.a * x**2 + self.b * x + self.c


def fit_parabola(sizes: list[float], losses: list[float], budget: str = "") -> Parabola:
    """Least squares in log N over the best size and its two neighbours; refused with fewer than MIN_SIZES
    sizes, or with the best size at an edge of the sweep (the minimum lies outside it)."""
    distinct = len(set(sizes))
    if distinct < MIN_SIZES:
        raise IsoFlopRefused(
            f"budget {budget or '?'} has {distinct} model size(s): a parabola in log N needs at least "
            f"{MIN_SIZES}; sweep more sizes (model.scale=1,2,3,4,5)"
        )
    ordered = sorted(zip(sizes, losses, strict=True))
    best = min(range(len(ordered)), key=lambda i: ordered[i][1])
    if best in (0, len(ordered) - 1):
        edge, fix = ("smallest", "smaller sizes or a larger budget") if best == 0 else ("largest", "larger sizes")
        raise IsoFlopRefused(
            f"budget {budget or '?'}: the best size is the {edge} swept (N = {ordered[best][0]:,.0f}), so the "
            f"minimum lies outside the sweep: sweep {fix}"
        )
    window = ordered[best - 1 : best + 2]
    a, b, c = np.polyfit(np.log([n for n, _ in window]), [loss for _, loss in window], 2)
    if a <= 0:  # three equal losses
        raise IsoFlopRefused(f"budget {budget or '?'}: the loss is flat around the best size, with no minimum")
    return Parabola(float(a), float(b), float(c), window[0][0], window[-1][0])


def power_law(budgets: list[float], values: list[float]) -> float:
    """The exponent of value ~ C^exponent, least squares in log-log."""
    return float(np.polyfit(np.log(budgets), np.log(values), 1)[0])


def interval(values: list[float]) -> tuple[float, float]:
    """(mean, half-width of its 95 % t-interval); half-width nan with one value."""
    from scipy import stats

    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, math.nan
    return mean, float(stats.t.ppf(0.975, len(values) - 1)) * statistics.stdev(values) / math.sqrt(len(values))


@dataclass
class Optimum:
    """One budget and seed under one count: the parabola, N_opt and D_opt."""

    parabola: Parabola
    n_opt: float
    d_opt: float


@dataclass
class IsoFlop:
    """The fits of a sweep, under each parameter count: budget -> seed -> Optimum; exponents per seed."""

    points: Points
    optima: dict[str, dict[float, dict[str, Optimum]]] = field(default_factory=dict)
    alpha: dict[str, list[float]] = field(default_factory=dict)  # N_opt ~ C^alpha, one per seed
    beta: dict[str, list[float]] = field(default_factory=dict)  # D_opt ~ C^beta, one per seed
    left_out: dict[float, str] = field(default_factory=dict)  # budget -> why it has no parabola


Points = dict[float, list[tuple[dict[str, int], float, float, str]]]  # budget -> (counts, tokens, loss, seed)


def isoflop_points(rows: list[dict[str, Any]]) -> Points:
    """The finished jobs by budget, in budget order: their parameter counts, tokens, final loss and seed."""
    points: Points = {}
    for row in rows:
        budget, loss, counts = override(row, "trainer.flops"), finite_loss(row), row.get("parameter_counts")
        if budget is None or loss is None or not counts or not row.get("tokens"):
            continue
        points.setdefault(float(budget), []).append((counts, float(row["tokens"]), loss, override(row, "seed") or ""))
    return dict(sorted(points.items()))


def isoflop_fit(rows: list[dict[str, Any]]) -> IsoFlop:
    """Fit every budget and seed, then the exponents across the budgets fitted; a budget that cannot be fitted
    is left out with its reason; IsoFlopRefused when fewer than 2 budgets are left."""
    points = isoflop_points(rows)
    fit = IsoFlop(points)
    seeds = sorted({seed for jobs in points.values() for *_, seed in jobs})
    for count in COUNTS:
        fit.optima[count] = {}
        for budget, jobs in fit.points.items():
            optima = {}
            for seed in seeds:
                mine = [(counts[count], tokens, loss) for counts, tokens, loss, s in jobs if s == seed]
                sizes = [n for n, _, _ in mine]
                label = f"{budget:.3g}" + (f" (seed {seed})" if seed else "")  # a sweep of one seed: none
                try:
                    parabola = fit_parabola(sizes, [loss for *_, loss in mine], label)
                except IsoFlopRefused as refused:
                    fit.left_out.setdefault(budget, str(refused))
                    break
                slope, offset = np.polyfit(np.log(sizes), np.log([d for _, d, _ in mine]), 1)
                n_opt = math.exp(parabola.x_min)
                optima[seed] = Optimum(parabola, n_opt, math.exp(offset + slope * parabola.x_min))
            else:
                fit.optima[count][budget] = optima
        budgets = list(fit.optima[count])
        if len(budgets) < 2:
            why = "; ".join(fit.left_out.values())
            raise IsoFlopRefused(
                f"{len(budgets)} budget(s) of {len(points)} with a minimum inside the sweep: exponents across "
                f"budgets need at least 2" + (f" ({why})" if why else "")
            )
        fit.alpha[count] = [power_law(budgets, [fit.optima[count][C][s].n_opt for C in budgets]) for s in seeds]
        fit.beta[count] = [power_law(budgets, [fit.optima[count][C][s].d_opt for C in budgets]) for s in seeds]
    return fit


def with_interval(values: list[float], fmt: str) -> str:
    mean, half = interval(values)
    return f"{mean:{fmt}}" + (f" +- {half:{fmt}}" if math.isfinite(half) else " (one seed: no interval)")


def best_sizes(rows: list[dict[str, Any]]) -> str:
    """Per budget, the swept size with the lowest mean final loss over its seeds: what the sweep saw, fit or not."""
    by_budget: dict[float, dict[int, list[tuple[float, float]]]] = {}
    for row in rows:
        budget, loss, counts = override(row, "trainer.flops"), finite_loss(row), row.get("parameter_counts")
        if budget is not None and loss is not None and counts and row.get("tokens"):
            by_budget.setdefault(float(budget), {}).setdefault(counts["all"], []).append((loss, row["tokens"]))
    lines = ["| budget C (FLOPs) | sizes | best N (all) | its mean loss | its tokens | tokens per parameter |"]
    lines.append("|---|---|---|---|---|---|")
    for budget, sizes in sorted(by_budget.items()):
        n, runs = min(sizes.items(), key=lambda item: statistics.fmean(loss for loss, _ in item[1]))
        edge = " (the smallest swept)" if n == min(sizes) else " (the largest swept)" if n == max(sizes) else ""
        tokens = statistics.fmean(t for _, t in runs)
        mean = statistics.fmean(loss for loss, _ in runs)
        lines.append(f"| {budget:.3g} | {len(sizes)} | {n:,}{edge} | {mean:.4f} | {tokens:,.0f} | {tokens / n:,.1f} |")
    return "\n".join(lines)


def isoflop_text(rows: list[dict[str, Any]]) -> tuple[str, IsoFlop | None]:
    """summary.md's isoFLOP section: the best swept size per budget; N_opt, D_opt and tokens per parameter
    per budget, and the exponents, where the parabolas have minima."""
    best = f"The best swept size at each budget:\n\n{best_sizes(rows)}"
    try:
        fit = isoflop_fit(rows)
    except IsoFlopRefused as refused:
        return f"## isoFLOP fit\n\n{best}\n\nNo isoFLOP fit: {refused}", None
    seeds = len(next(iter(fit.optima["all"].values())))
    lines = [
        "## isoFLOP fit",
        "",
        f"A parabola in log N per budget and seed (`src/sweeps/isoflop.py`); each number: the mean over {seeds} "
        f"seed(s) +- the half-width of its 95 % t-interval; the parabola goes through the best swept size and "
        f"its two neighbours.",
        "",
        "| parameter count | N_opt ~ C^alpha | D_opt ~ C^beta |",
        "|---|---|---|",
    ]
    for count in COUNTS:
        lines.append(
            f"| {count} | {with_interval(fit.alpha[count], '.3f')} | {with_interval(fit.beta[count], '.3f')} |"
        )
    lines += [
        "",
        "| budget C (FLOPs) | count | N_opt | D_opt (tokens) | D_opt / N_opt | loss at N_opt |",
        "|---|---|---|---|---|---|",
    ]
    for count in COUNTS:
        for budget, by_seed in fit.optima[count].items():
            optima = list(by_seed.values())
            n = with_interval([o.n_opt for o in optima], ",.0f")
            d = with_interval([o.d_opt for o in optima], ",.0f")
            ratio = with_interval([o.d_opt / o.n_opt for o in optima], ".1f")
            loss = with_interval([o.parabola(o.parabola.x_min) for o in optima], ".4f")
            lines.append(f"| {budget:.3g} | {count} | {n} | {d} | {ratio} | {loss} |")
    left_out = [f"Left out of the fit: {why}" for why in fit.left_out.values()]
    return "\n".join([*lines, "", *left_out, *([""] if left_out else []), best]), fit
