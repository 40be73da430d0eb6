"""Figures: where each head attends, one grid per layer (TensorBoard and the plot_attention command)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")  # files and TensorBoard only, never a window

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402
from torch import Tensor  # noqa: E402

CELL = 3.0  # inches per head panel
TITLE = 0.6  # inches for the figure title
DPI = 100
MAX_LABELLED_TOKENS = 40  # beyond this the characters on the axes would overlap


def token_label(ch: str) -> str:
    return {"\n": "⏎", " ": "␣", "\t": "⇥"}.get(ch, ch)


def attention_figure(
    layers: list[Tensor], tokens: list[str], title: str = "", layer_numbers: list[int] | None = None
) -> Figure:
    """One row per layer, one panel per head: weights[i, j] = how much position i reads j.

    layers: each (h, T, T) for one sequence; layer_numbers: their indices in the model (default
    0, 1, ...). The future (above the diagonal, exactly 0 under the causal mask) is drawn light
    grey, so the causal triangle is plain to see.
    """
    layer_numbers = layer_numbers or list(range(len(layers)))
    num_heads, T = layers[0].shape[0], layers[0].shape[-1]
    fig, axes = plt.subplots(
        len(layers), num_heads, figsize=(num_heads * CELL, len(layers) * CELL + TITLE), dpi=DPI, squeeze=False
    )
    future = np.triu(np.ones((T, T), dtype=bool), k=1)
    cmap = plt.get_cmap("viridis").with_extremes(bad="#dddddd")
    labels = [token_label(t) for t in tokens] if T <= MAX_LABELLED_TOKENS else None
    for layer, weights in enumerate(layers):
        for head in range(num_heads):
            ax = axes[layer][head]
            w = np.ma.masked_array(weights[head].detach().float().cpu().numpy(), mask=future)
            ax.imshow(w, cmap=cmap, vmin=0.0, vmax=1.0, interpolation="nearest")
            ax.set_title(f"layer {layer_numbers[layer]} head {head}", fontsize=9)
            if labels:
                ax.set_xticks(range(T), labels, fontsize=6, family="monospace")
                ax.set_yticks(range(T), labels, fontsize=6, family="monospace")
            else:
                ax.set_xticks([])
                ax.set_yticks([])
    fig.suptitle(title or "attention weights (row: query position, column: key position)", fontsize=10)
    fig.subplots_adjust(left=0.04, right=0.98, bottom=0.04, top=1 - TITLE / (len(layers) * CELL + TITLE), hspace=0.35)
    return fig


def save_png(fig: Figure, path: str) -> None:
    """At the figure's exact size (figsize x DPI), so the pixel size is predictable."""
    fig.savefig(path, dpi=DPI, format="png")
    plt.close(fig)


def _value(text: str) -> int | float | str:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def sweep_figure(rows: list[dict], swept: list[str]) -> Figure:
    """Best validation loss of each finished job against each swept value and the model size."""
    done = [r for r in rows if r.get("status") == "ok"]
    panels = [*swept, "parameters"]
    fig, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 3.6), dpi=DPI, squeeze=False)
    for ax, key in zip(axes[0], panels, strict=True):
        points = []
        for row in done:
            if key == "parameters":
                x = row.get("parameters")
            else:
                given = dict(o.split("=", 1) for o in row.get("overrides", []) if "=" in o)
                x = _value(given[key]) if key in given else None
            if x is not None:
                points.append((x, row["best_val_loss"], row["job"]))
        numeric = all(isinstance(x, float | int) for x, _, _ in points)
        labels = sorted({str(x) for x, _, _ in points})
        for x, y, job in points:
            position = x if numeric else labels.index(str(x))
            ax.scatter(position, y, color="tab:blue")
            ax.annotate(str(job), (position, y), textcoords="offset points", xytext=(4, 4), fontsize=7)
        if not numeric:
            ax.set_xticks(range(len(labels)), labels)
        elif all(isinstance(x, int) for x, _, _ in points) and key != "parameters":
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # 2 heads, not 2.5
        if key == "parameters" and points:
            ax.set_xscale("log")
        ax.set_xlabel(key)
        ax.set_ylabel("best val loss")
        ax.grid(alpha=0.3)
    failed = len(rows) - len(done)
    fig.suptitle(f"{len(done)} finished jobs" + (f", {failed} failed (see summary.md)" if failed else ""), fontsize=10)
    fig.tight_layout()
    return fig
