"""A sweep's summary.png: the best val loss of each finished job against each swept value and the
model size, with the seed groups' spread and the power-law fit of src/sweeps/analysis.py."""

from __future__ import annotations

import math

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from src.plots import DPI, KIND_COLOURS, plt  # pyplot as src.plots set it up: the Agg backend, never a window
from src.sweeps.analysis import HEAD_KINDS, PowerLaw, finite_loss, head_value, seed_groups
from src.sweeps.isoflop import COUNTS, IsoFlop, Points


def _value(text: str) -> int | float | str:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def _swept_value(row: dict, key: str) -> int | float | str | None:
    if key == "parameters":
        return row.get("parameters")
    given = dict(o.lstrip("+").split("=", 1) for o in row.get("overrides", []) if "=" in o)
    return _value(given[key]) if key in given else None


MAX_TICKS = 8  # more swept values than this: every k-th is labelled
MIN_SPAN = 0.05  # nats: a panel's loss axis spans at least this, so that seed noise is not drawn as a slope


def compact(value: int | float | str) -> str:
    """A tick label that stays short: 16, 0.003, 4.16K, 1.2M, 500G, 2T (a FLOP budget)."""
    if isinstance(value, str):
        return value
    for size, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "K")):
        if abs(value) >= size:
            return f"{value / size:.3g}{suffix}"
    return f"{value:g}"


class XAxis:
    """Where a panel draws each value: swept values evenly spaced in their order, parameter counts
    at log10(N), on a plain linear axis whose ticks are the values themselves (no 4x10^3 labels).
    Points that share a value (seeds, or other swept keys) are spread sideways, so that neither
    they nor their job labels sit on top of each other."""

    def __init__(self, values: list, log: bool):
        log = log and all(isinstance(v, int | float) and v > 0 for v in values)
        self.values = sorted(set(values), key=lambda v: (isinstance(v, str), str(v) if isinstance(v, str) else v))
        self.place = {v: (math.log10(v) if log else float(i)) for i, v in enumerate(self.values)}
        low, high = self.place[self.values[0]], self.place[self.values[-1]]
        self.step = (high - low) / (len(self.values) - 1) if len(self.values) > 1 else 1.0

    def __call__(self, value: int | float | str, k: int = 0, m: int = 1) -> float:
        """The k-th of m points at `value`."""
        return self.place[value] + (k - (m - 1) / 2) * min(0.15, 0.6 / m) * self.step

    def dress(self, ax: Axes, label: str) -> None:
        every = math.ceil(len(self.values) / MAX_TICKS)
        shown = self.values[::every]
        ax.set_xticks([self.place[v] for v in shown], [compact(v) for v in shown], fontsize=8)
        ax.set_xlim(self.place[self.values[0]] - self.step / 2, self.place[self.values[-1]] + self.step / 2)
        ax.set_xlabel(label)


def _dodged(points: list[tuple], axis: XAxis) -> list[tuple[float, int]]:
    """x of each (value, y, job) point, spread among the points that share its value, and its
    place k among them (labels alternate above and below by k, so neighbours' labels never touch)."""
    shared: dict = {}
    for value, _, job in points:
        shared.setdefault(value, []).append(job)
    placed = []
    for value, _, job in points:
        k = sorted(shared[value]).index(job)
        placed.append((axis(value, k, len(shared[value])), k))
    return placed


def sweep_figure(
    rows: list[dict], swept: list[str], fit: PowerLaw | None = None, residuals: dict | None = None
) -> Figure:
    """Best val loss of each finished job against each swept value and the model size.

    With repeated seeds, each configuration's mean and standard deviation is drawn over its
    jobs; with a power-law fit, its curve is on the size panel and each job's residual beside it.
    """
    done = [(row, loss) for row in rows if (loss := finite_loss(row)) is not None]
    groups = seed_groups(rows)
    by_job = {row["job"]: row for row, _ in done}
    # A panel per swept key, and the size when sizes differ (a constant panel says nothing); a sweep of seeds
    # alone: its seeds
    panels = [key for key in swept if key != "seed"]
    if len({row.get("parameters") for row, _ in done}) > 1:
        panels.append("parameters")
    panels = panels or (["seed"] if "seed" in swept else ["parameters"])
    panels += ["residual"] if fit and residuals else []
    heads = any(head_value(row, "best_induction") is not None for row, _ in done)
    fig, axes = plt.subplots(
        3 if heads else 1, len(panels), figsize=(4 * len(panels), 3.6 * (3 if heads else 1)), dpi=DPI, squeeze=False
    )
    if heads:
        for column, key in enumerate(panels):
            _head_panels(axes[1][column], axes[2][column], done, groups, key)
    for ax, key in zip(axes[0], panels, strict=True):
        ax.grid(alpha=0.3)
        if key == "residual":
            points = [(by_job[j]["parameters"], r, j) for j, r in (residuals or {}).items() if j in by_job]
        else:
            points = [(x, loss, row["job"]) for row, loss in done if (x := _swept_value(row, key)) is not None]
        if not points:
            ax.set_xlabel(key)
            continue
        values = [x for x, _, _ in points]
        axis = XAxis(values, log=key in ("parameters", "residual"))
        for (x, k), (_, y, job) in zip(_dodged(points, axis), points, strict=True):
            color = "tab:orange" if key == "residual" else "tab:blue"
            ax.scatter(x, y, color=color, alpha=0.6 if groups else 1.0, s=16)
            above = k % 2 == 0
            ax.annotate(
                str(job),
                (x, y),
                textcoords="offset points",
                xytext=(3, 3 if above else -3),
                fontsize=7,
                va="bottom" if above else "top",
            )
        axis.dress(ax, "parameters" if key == "residual" else key)
        low, high = ax.get_ylim()
        if high - low < MIN_SPAN:
            ax.set_ylim((low + high - MIN_SPAN) / 2, (low + high + MIN_SPAN) / 2)
        if key == "residual":
            ax.axhline(0.0, color="grey", linewidth=0.8)
            ax.set_ylabel("best val loss - fit", fontsize=8)
            continue
        label = "mean ± std over seeds"  # in the legend once
        for g in groups or []:  # each configuration's mean over its seeds, +- one standard deviation
            xs = {_swept_value(row, key) for row in g.rows}
            if len(xs) == 1 and None not in xs:
                ax.errorbar(axis(xs.pop()), g.mean, yerr=g.std or 0, fmt="_", color="tab:red", capsize=4, label=label)
                label = None
        if key == "parameters" and fit:
            n = np.geomspace(min(values), max(values), 100)
            ax.plot(
                np.log10(n), fit(n), "--", color="tab:orange", label=f"{fit.a:.3g}·N^-{fit.alpha:.2f} + {fit.c:.3f}"
            )
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
        ax.set_ylabel("best val loss", fontsize=8)
    failed = sum(1 for row in rows if row.get("status") != "ok")
    no_loss = len(rows) - failed - len(done)
    title = f"{len(done)} finished jobs" + (f", {failed} failed (see summary.md)" if failed else "")
    title += f", {no_loss} without a finite val loss" if no_loss else ""
    if fit:
        title += f"; loss vs size: L(N) = a·N^-alpha + c, alpha = {fit.alpha:.3f}"
    elif done:
        title += "; no power-law fit of loss against size (summary.md says why)"
    fig.suptitle(title, fontsize=10, wrap=True)  # within the figure: one swept key draws one narrow column
    fig.tight_layout()
    return fig


def _head_panels(counts_ax: Axes, scores_ax: Axes, done: list, groups: list | None, key: str) -> None:
    """Below the loss: heads of each kind per job, and its best induction and in-context scores
    (seed groups: their mean as a bar), against the same swept value."""
    if key == "residual":
        counts_ax.axis("off")
        scores_ax.axis("off")
        return
    points = [(x, row) for row, _ in done if (x := _swept_value(row, key)) is not None]
    if not points:
        return
    axis = XAxis([x for x, _ in points], log=key == "parameters")
    placed = _dodged([(x, 0, row["job"]) for x, row in points], axis)
    counted = any(head_value(row, f"{kind}_heads") for _, row in points for kind, _ in HEAD_KINDS)
    if not counted:  # a row of zeros says less than this
        counts_ax.text(
            0.5, 0.5, "no head of any kind in any job", ha="center", va="center", transform=counts_ax.transAxes
        )
    for k, (kind, short) in enumerate(HEAD_KINDS if counted else ()):
        offset = (k - 1.5) * 0.06 * axis.step
        xs = [x + offset for (x, _), (_, row) in zip(placed, points, strict=True)]
        ys = [head_value(row, f"{kind}_heads") for _, row in points]
        shown = [(x, y) for x, y in zip(xs, ys, strict=True) if y is not None]
        if shown:
            counts_ax.scatter(*zip(*shown, strict=True), s=18, color=KIND_COLOURS[kind], label=short)
    axis.dress(counts_ax, key)
    counts_ax.set_ylabel("heads of each kind", fontsize=8)
    counts_ax.grid(alpha=0.3)
    if counts_ax.get_legend_handles_labels()[0]:
        counts_ax.legend(fontsize=7, ncol=4)
    in_context_ax = scores_ax.twinx()
    for (x, _), (_, row) in zip(placed, points, strict=True):
        induction, in_context = head_value(row, "best_induction"), head_value(row, "in_context")
        if induction is not None:
            scores_ax.scatter(x, induction, s=18, color=KIND_COLOURS["induction"])
        if in_context is not None:
            in_context_ax.scatter(x, in_context, s=18, marker="x", color="tab:grey")
    for g in groups or []:  # each configuration's mean over its seeds
        xs = {_swept_value(row, key) for row in g.rows}
        mean = g.head_mean("best_induction")
        if len(xs) == 1 and None not in xs and mean is not None:
            scores_ax.plot(axis(xs.pop()), mean, "_", color=KIND_COLOURS["induction"], markersize=14)
    axis.dress(scores_ax, key)
    scores_ax.set_ylim(0, 1)
    scores_ax.set_ylabel("best induction score (dots)", fontsize=8, color=KIND_COLOURS["induction"])
    in_context_ax.set_ylabel("in-context score, nats (x)", fontsize=8, color="tab:grey")
    scores_ax.grid(alpha=0.3)


def isoflop_figure(points: Points, fit: IsoFlop | None) -> Figure:
    """Left: the isoFLOP curves, final val loss against N (all parameters) per budget, the seeds' mean joined;
    with a fit, each seed's parabola (over the three sizes it goes through) and its minimum (a star). Right,
    with a fit: N_opt and D_opt against C under each parameter count, log-log, with the seeds' mean power law."""
    fig, axes = plt.subplots(1, 2 if fit else 1, figsize=(11 if fit else 5.5, 4.2), dpi=DPI, squeeze=False)
    curves = axes[0][0]
    colours = plt.get_cmap("viridis")(np.linspace(0.0, 0.85, len(points)))
    for colour, (budget, jobs) in zip(colours, points.items(), strict=True):
        sizes = [counts["all"] for counts, *_ in jobs]
        curves.scatter(sizes, [loss for _, _, loss, _ in jobs], color=colour, s=14, label=f"C = {budget:.3g}")
        means = {n: np.mean([loss for c, _, loss, _ in jobs if c["all"] == n]) for n in sorted(set(sizes))}
        curves.plot(list(means), list(means.values()), color=colour, alpha=0.4 if fit else 0.8, linewidth=1)
        for optimum in fit.optima["all"].get(budget, {}).values() if fit else []:
            grid = np.geomspace(optimum.parabola.low, optimum.parabola.high, 50)
            curves.plot(grid, optimum.parabola(np.log(grid)), color=colour, alpha=0.6, linewidth=1)
            curves.scatter([optimum.n_opt], [optimum.parabola(optimum.parabola.x_min)], color=colour, marker="*", s=80)
    curves.set(xscale="log", xlabel="parameters N (all)", ylabel="final val loss", title="isoFLOP curves")
    curves.grid(alpha=0.3)
    curves.legend(fontsize=8)
    if fit is not None:
        laws = axes[0][1]
        for colour, count in zip(("tab:blue", "tab:orange", "tab:green"), COUNTS, strict=True):
            budgets = np.asarray(list(fit.optima[count]))
            for what, marker, line, exponents in (("N_opt", "o", "-", fit.alpha), ("D_opt", "s", "--", fit.beta)):
                values = [[getattr(o, what.lower()) for o in fit.optima[count][C].values()] for C in budgets]
                means = np.exp([np.mean(np.log(v)) for v in values])
                slope = float(np.mean(exponents[count]))
                offset = float(np.mean(np.log(means) - slope * np.log(budgets)))
                laws.plot(budgets, np.exp(offset) * budgets**slope, line, color=colour, linewidth=1)
                label = f"{what} ({count}) ~ C^{slope:.2f}"
                laws.scatter(budgets, means, color=colour, marker=marker, s=18, label=label)
        laws.set(xscale="log", yscale="log", xlabel="budget C (FLOPs)", ylabel="N_opt, D_opt (tokens)")
        laws.set_title("compute-optimal size and tokens")
        laws.grid(alpha=0.3, which="both")
        laws.legend(fontsize=7)
    fig.tight_layout()
    return fig
