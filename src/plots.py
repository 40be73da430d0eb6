"""Figures of attention: where each head attends (TensorBoard, plot_attention). A sweep's summary.png
is drawn by src/sweeps/figure.py with this module's DPI and save_png."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")  # files and TensorBoard only, never a window

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
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


class AttentionFigure:
    """attention_figure of one layer, redrawn for each layer at every validation of a run.

    The axes and token labels are most of the drawing time (BENCHMARKS.md, "Media") and
    never change within a run, so they are drawn once and kept as pixels; each render draws only
    what changes over them, the heat maps, their frames and the titles (matplotlib's blitting):
    the same pixels as a fresh attention_figure (tested), in milliseconds.
    """

    def __init__(self, num_heads: int, tokens: list[str]):
        T = len(tokens)
        self.figure = attention_figure([torch.zeros(num_heads, T, T)], tokens, " ")
        self.future = np.triu(np.ones((T, T), dtype=bool), k=1)
        self.panels = self.figure.axes  # one per head
        (self.title,) = self.figure.texts  # the suptitle, the figure's one text of its own
        for ax in self.panels:  # left out of canvas.draw(): render() draws them
            for artist in self._changing(ax):
                artist.set_animated(True)
        self.title.set_animated(True)
        self.figure.canvas.draw()
        self.background = self.figure.canvas.copy_from_bbox(self.figure.bbox)

    @staticmethod
    def _changing(ax: Axes) -> list:
        """In drawing order: the heat map, its frame (over the image's edge), the panel title."""
        return [ax.get_images()[0], *ax.spines.values(), ax.title]

    def render(self, weights: Tensor, layer: int, title: str) -> np.ndarray:
        """weights (h, T, T) of layer `layer` -> the figure as an (height, width, 3) uint8 RGB array."""
        canvas = self.figure.canvas
        canvas.restore_region(self.background)
        for head, (ax, w) in enumerate(zip(self.panels, weights.detach().float().cpu().numpy(), strict=True)):
            image, *frame, panel_title = self._changing(ax)
            image.set_data(np.ma.masked_array(w, mask=self.future))
            panel_title.set_text(f"layer {layer} head {head}")
            for artist in (image, *frame, panel_title):
                self.figure.draw_artist(artist)
        self.title.set_text(title)
        self.figure.draw_artist(self.title)
        return np.asarray(canvas.buffer_rgba())[..., :3].copy()

    def close(self) -> None:
        plt.close(self.figure)


# A colour per kind of head (src/model/head_scores.KINDS), for the heads-at-a-glance grid.
KIND_COLOURS = {
    "previous_token": (0.12, 0.47, 0.71),
    "duplicate_token": (0.58, 0.40, 0.74),
    "induction": (0.84, 0.15, 0.16),
    "first_token": (0.17, 0.63, 0.17),
}
KIND_SHORT = {"previous_token": "prev", "duplicate_token": "dup", "induction": "ind", "first_token": "first"}


class HeadsFigure:
    """Heads at a glance: a layers x heads grid, each cell in its head's kind's colour, as deep as
    that score (white: no kind), with the kind and its score written in. Built once per run; each
    render sets the cells' colours and words and draws the small figure again."""

    def __init__(self, layers: int, heads: int):
        self.figure, ax = plt.subplots(figsize=(1.1 * heads + 1.2, 0.75 * layers + 1.0), dpi=DPI)
        self.image = ax.imshow(np.ones((layers, heads, 3)), interpolation="nearest", aspect="auto")
        ax.set_xticks(range(heads), [f"head {h}" for h in range(heads)], fontsize=8)
        ax.set_yticks(range(layers), [f"layer {layer}" for layer in range(layers)], fontsize=8)
        ax.tick_params(length=0)
        self.words = [
            [ax.text(h, layer, "", ha="center", va="center", fontsize=8) for h in range(heads)]
            for layer in range(layers)
        ]
        self.title = ax.set_title("", fontsize=9)
        self.figure.tight_layout()

    def render(self, result, title: str) -> np.ndarray:  # result: src.model.head_scores.HeadScores
        """The grid for `result` -> an (height, width, 3) uint8 RGB array."""
        kinds = result.kinds()
        cells = np.ones((len(kinds), len(kinds[0]), 3))
        for layer, row in enumerate(kinds):
            for head, kind in enumerate(row):
                if kind is None:
                    best = max(result.scores[k][layer, head].item() for k in KIND_COLOURS)
                    self.words[layer][head].set_text(f"-\n{best:.2f}")
                    self.words[layer][head].set_color("grey")
                    continue
                score = result.scores[kind][layer, head].item()
                colour = np.array(KIND_COLOURS[kind])
                cells[layer, head] = 1 - min(score, 1.0) * (1 - colour)  # white at 0, the colour at 1
                self.words[layer][head].set_text(f"{KIND_SHORT[kind]}\n{score:.2f}")
                self.words[layer][head].set_color("white" if score > 0.6 else "black")
        self.image.set_data(cells)
        self.title.set_text(title)
        self.figure.canvas.draw()
        return np.asarray(self.figure.canvas.buffer_rgba())[..., :3].copy()

    def close(self) -> None:
        plt.close(self.figure)


def save_png(fig: Figure, path: str) -> None:
    """At the figure's exact size (figsize x DPI), so the pixel size is predictable."""
    fig.savefig(path, dpi=DPI, format="png")
    plt.close(fig)
