"""summary.md from the jobs' result.json rows: each job's best val loss and what its heads became, the
seeds' means and spread, a power law over model size. Numbers and text only."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any

# Overrides that do not change a run's result: left out where runs are grouped (here and src/compare.py).
IGNORED_PREFIXES = ("seed", "paths.", "hydra.", "ckpt_path", "overwrite", "progress_bar", "explorer", "sample.")


def finite_loss(row: dict[str, Any], metric: str = "best_val_loss") -> float | None:
    """A finished job's best val loss (or other `metric`), or None (failed, missing, or never validated)."""
    loss = row.get(metric)
    ok = row.get("status") == "ok" and isinstance(loss, (int, float)) and math.isfinite(loss)
    return float(loss) if ok else None


def configuration(overrides: list[str]) -> tuple[str, ...]:
    """What sets a run apart: its overrides, less the seed and the keys that do not change the result."""
    return tuple(o for o in overrides if not o.split("=", 1)[0].lstrip("+~").startswith(IGNORED_PREFIXES))


# What each head became, from result.json's "heads" (src/training/heads.py); a head's kind and the
# threshold that makes it one are defined once, in src/model/head_scores.py (KINDS, THRESHOLD).
HEAD_KINDS = (("previous_token", "prev"), ("duplicate_token", "dup"), ("induction", "ind"), ("first_token", "first"))


def head_value(row: dict[str, Any], key: str) -> float | None:
    """One number of a finished job's head scores (e.g. "induction_heads", "best_induction"), or None."""
    heads = row.get("heads") if finite_loss(row) is not None else None
    value = heads.get(key) if isinstance(heads, dict) else None
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def head_counts(row: dict[str, Any]) -> str:
    """ "prev 2 dup 0 ind 1 first 0": how many heads of each kind the job's model has."""
    counts = [(short, head_value(row, f"{kind}_heads")) for kind, short in HEAD_KINDS]
    return " ".join(f"{short} {n:.0f}" for short, n in counts if n is not None) or "-"


def configuration_label(row: dict[str, Any]) -> str:
    named = row.get("run_name") or " ".join(row.get("overrides", []))
    return ",".join(part for part in named.split(",") if not part.startswith("seed=")) or "(defaults)"


@dataclass
class Group:
    """The jobs of one configuration (its seeds): mean and seed-to-seed spread of the best val loss."""

    label: str
    jobs: list[int]
    losses: list[float]
    parameters: int | None
    rows: list[dict[str, Any]]

    def head_mean(self, key: str) -> float | None:
        """A head score's mean over the seeds that have it (see head_value), as the loss's mean."""
        values = [v for row in self.rows if (v := head_value(row, key)) is not None]
        return statistics.fmean(values) if values else None

    @property
    def mean(self) -> float:
        return statistics.fmean(self.losses)

    @property
    def std(self) -> float | None:  # the sample standard deviation; None for a single seed
        return statistics.stdev(self.losses) if len(self.losses) > 1 else None


def seed_groups(rows: list[dict[str, Any]]) -> list[Group] | None:
    """One group per configuration, or None when no configuration ran more than once (no seeds repeat)."""
    groups: dict[tuple[str, ...], Group] = {}
    for row in rows:
        loss = finite_loss(row)
        if loss is None:
            continue
        new = Group(configuration_label(row), [], [], row.get("parameters"), [])
        group = groups.setdefault(configuration(row.get("overrides", [])), new)
        group.jobs.append(row["job"])
        group.losses.append(loss)
        group.rows.append(row)
    if all(len(g.losses) == 1 for g in groups.values()):
        return None
    return list(groups.values())


@dataclass
class PowerLaw:
    """L(N) = a * N^(-alpha) + c, fitted to best val loss against parameter count."""

    a: float
    alpha: float
    c: float
    at_edge: bool  # alpha ended at the end of the searched range: the data do not pin it down

    def __call__(self, n: Any) -> Any:
        return self.a * n ** (-self.alpha) + self.c


ALPHA_RANGE = (1e-3, 4.0)


def fit_power_law(sizes: list[float], losses: list[float]) -> PowerLaw:
    """Least squares in alpha: for a fixed alpha, a and c are linear, so search alpha, then refine.

    Sizes are divided by their geometric mean first, so N^(-alpha) stays near 1 for any alpha.
    """
    import numpy as np

    x, y = np.asarray(sizes, dtype=float), np.asarray(losses, dtype=float)
    scale = float(np.exp(np.log(x).mean()))

    def solve(alpha: float) -> tuple[float, Any]:
        design = np.stack([(x / scale) ** -alpha, np.ones_like(x)], axis=1)
        coef = np.linalg.lstsq(design, y, rcond=None)[0]
        return float(((design @ coef - y) ** 2).sum()), coef

    grid = np.geomspace(*ALPHA_RANGE, 200)
    best = int(np.argmin([solve(alpha)[0] for alpha in grid]))
    from scipy.optimize import minimize_scalar

    between = (grid[max(best - 1, 0)], grid[min(best + 1, len(grid) - 1)])  # the best grid point's neighbours
    alpha = minimize_scalar(lambda a: solve(a)[0], bounds=between, method="bounded", options={"xatol": 1e-12}).x
    a_scaled, c = solve(alpha)[1]
    at_edge = best in (0, len(grid) - 1)
    return PowerLaw(float(a_scaled * scale**alpha), float(alpha), float(c), at_edge)


MIN_SIZES = 4  # L(N) has three free numbers: with three sizes it passes through any three falling points


def seed_spread(rows: list[dict[str, Any]]) -> float | None:
    """The seeds' pooled standard deviation over the configurations that ran more than once, or None."""
    groups = [g for g in seed_groups(rows) or [] if g.std is not None]
    if not groups:
        return None
    return math.sqrt(statistics.fmean(g.std**2 for g in groups))


def no_fit(why: str) -> tuple[None, dict[int, float], str]:
    return None, {}, f"No fit: {why}"


def scaling(rows: list[dict[str, Any]]) -> tuple[PowerLaw | None, dict[int, float], str]:
    """The power-law fit over the finished jobs, each job's residual (loss - fit), and one line saying so.

    A fit is reported only where it means something; otherwise the line says "No fit" and why:
    fewer than MIN_SIZES sizes, a loss that does not fall with size, an exponent that ran to the
    end of its search range (the losses do not bend like a power law), or residuals more than
    twice the seed-to-seed spread (the curve misses the data by more than the noise).
    """
    points = [(row["parameters"], loss, row["job"]) for row in rows if (loss := finite_loss(row)) is not None]
    points = [(n, loss, job) for n, loss, job in points if isinstance(n, (int, float)) and n > 0]
    sizes = sorted({n for n, _, _ in points})
    if len(sizes) < MIN_SIZES:
        return no_fit(
            f"{len(sizes)} model size(s) among the finished jobs. L(N) = a*N^(-alpha) + c has three free "
            f"numbers and passes through any three falling points, so it needs at least {MIN_SIZES} sizes to be "
            f"tested: sweep more sizes."
        )
    fit = fit_power_law([n for n, _, _ in points], [loss for _, loss, _ in points])
    if fit.a <= 0:
        return no_fit(
            f"over {len(sizes)} sizes the best val loss does not fall with parameter count "
            f"(the best fit has a = {fit.a:.3g} <= 0)."
        )
    if fit.at_edge:
        return no_fit(
            f"the exponent ran to the end of its search range {ALPHA_RANGE} (alpha = {fit.alpha:.3g}): "
            f"over these {len(sizes)} sizes the losses do not bend like a power law."
        )
    residuals = {job: loss - float(fit(n)) for n, loss, job in points}
    rms = math.sqrt(statistics.fmean(r * r for r in residuals.values()))
    spread = seed_spread(rows)
    if spread is not None and rms > 2 * spread:
        return no_fit(
            f"the best power law misses the jobs by {rms:.4f} (rms), more than twice the seeds' spread "
            f"({spread:.4f}): loss against size is not a power law over these {len(sizes)} sizes."
        )
    line = (
        f"L(N) = {fit.a:.4g} * N^(-{fit.alpha:.3f}) + {fit.c:.4f}, fitted to {len(points)} jobs over "
        f"{len(sizes)} sizes ({sizes[0]:,} to {sizes[-1]:,} parameters); rms residual {rms:.4f}"
    )
    if spread is None:
        line += "; no seed repeats, so the residuals cannot be compared with seed noise (add seed=1,2,3)."
    else:
        line += f", within twice the seeds' spread ({spread:.4f})."
    return fit, residuals, line


def number(value: Any, fmt: str) -> str:
    return format(value, fmt) if isinstance(value, (int, float)) and math.isfinite(value) else "-"


def format_table(rows: list[dict[str, Any]], residuals: dict[int, float] | None = None) -> str:
    columns = ["job", "overrides", "parameters", "best val loss", "bpc", "heads of each kind", "best induction"]
    columns += ["in-context", "max K-comp", "copying OV", "tokens/s (run)", "wall", "status"]
    if residuals:
        columns.insert(4, "fit residual")
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        status = row.get("status", "missing")
        if status == "failed":
            status = f"FAILED: {row.get('reason', '')}"
        elif status == "ok" and finite_loss(row) is None:
            status = "ok, no finite val loss"
        cells = [
            str(row["job"]),
            row.get("run_name") or " ".join(row.get("overrides", [])),
            number(row.get("parameters"), ","),
            number(row.get("best_val_loss"), ".4f"),
            number(row.get("best_val_bpc"), ".3f"),
            head_counts(row),
            number(head_value(row, "best_induction"), ".2f"),
            number(head_value(row, "in_context"), "+.3f"),
            number(head_value(row, "max_k_composition"), ".2f"),
            number(head_value(row, "most_copying_positivity"), "+.2f"),
            number(row.get("tokens_per_sec"), ",.0f"),
            number(row.get("wall_seconds"), ".0f") + "s",
            status,
        ]
        if residuals:
            cells.insert(4, number(residuals.get(row["job"]), "+.4f"))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def format_groups(groups: list[Group]) -> str:
    """Per configuration: mean best val loss, its seed-to-seed spread and the number of seeds."""
    kinds = " ".join(short for _, short in HEAD_KINDS)
    lines = [
        f"| configuration | parameters | mean best val loss | std | mean heads ({kinds}) | mean best induction "
        "| mean in-context | n | jobs |",
        "|" + "---|" * 9,
    ]
    for g in sorted(groups, key=lambda g: g.mean):
        counts = " ".join(number(g.head_mean(f"{kind}_heads"), ".1f") for kind, _ in HEAD_KINDS)
        lines.append(
            f"| {g.label} | {number(g.parameters, ',')} | {g.mean:.4f} | {number(g.std, '.4f')} | {counts} "
            f"| {number(g.head_mean('best_induction'), '.2f')} | {number(g.head_mean('in_context'), '+.3f')} "
            f"| {len(g.losses)} | {', '.join(map(str, g.jobs))} |"
        )
    return "\n".join(lines)


def summary_text(rows: list[dict[str, Any]]) -> tuple[str, PowerLaw | None, dict[int, float]]:
    """summary.md's body: the jobs, the seeds' mean and spread when seeds repeat, the size fit."""
    fit, residuals, fit_line = scaling(rows)
    parts = [format_table(rows, residuals)]
    groups = seed_groups(rows)
    if groups:
        parts.append("## Mean and spread over seeds\n\n" + format_groups(groups))
    parts.append("## Loss against model size\n\n" + fit_line)
    return "\n\n".join(parts), fit, residuals
