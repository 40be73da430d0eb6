"""Figures of attention: where each head attends (TensorBoard, plot_attention), and the heads' kinds."""

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
BAR = 0.9  # inches on the right for the colour bar (what a weight's colour means)
DPI = 100
MAX_LABELLED_TOKENS = 40  # beyond this the characters on the axes would overlap
TOKEN_LABELS = {"\n": "⏎", " ": "␣", "\t": "⇥"}  # the characters an axis would show as nothing


def attention_figure(
    layers: list[Tensor], tokens: list[str], title: str = "", layer_numbers: list[int] | None = None
) -> Figure:
    """One row per layer (each (h, T, T) for one sequence), one panel per head: weights[i, j] = how much
    position i reads j. The future (exactly 0 under the causal mask) is light grey."""
    layer_numbers = layer_numbers or list(range(len(layers)))
    num_heads, T = layers[0].shape[0], layers[0].shape[-1]
    width, height = num_heads * CELL + BAR, len(layers) * CELL + TITLE
    fig, axes = plt.subplots(len(layers), num_heads, figsize=(width, height), dpi=DPI, squeeze=False)
    future = np.triu(np.ones((T, T), dtype=bool), k=1)
    cmap = plt.get_cmap("viridis").with_extremes(bad="#dddddd")
    labels = [TOKEN_LABELS.get(t, t) for t in tokens] if T <= MAX_LABELLED_TOKENS else None
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
    right = (num_heads * CELL - 0.06) / width
    fig.subplots_adjust(left=0.04 * CELL / width, right=right, bottom=0.04, top=1 - TITLE / height, hspace=0.35)
    bar = fig.add_axes((right + 0.15 / width, 0.04 + 0.1 / height, 0.16 / width, 0.92 - TITLE / height - 0.2 / height))
    colours = fig.colorbar(ax.images[0], cax=bar, ticks=[0, 0.25, 0.5, 0.75, 1])
    colours.ax.tick_params(labelsize=7)
    colours.set_label("attention weight (grey: the future)", fontsize=8)
    return fig


class AttentionFigure:
    """attention_figure of one layer, redrawn at every validation. The axes and token labels are most of
    the drawing time (BENCHMARKS.md, "Media") and never change, so they are kept as pixels and each
    render draws only the heat maps, frames and titles over them (matplotlib's blitting)."""

    def __init__(self, num_heads: int, tokens: list[str]):
        T = len(tokens)
        self.figure = attention_figure([torch.zeros(num_heads, T, T)], tokens, " ")
        self.future = np.triu(np.ones((T, T), dtype=bool), k=1)
        self.panels = self.figure.axes[:num_heads]  # one per head (the last axes: the colour bar, drawn once)
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
    """Heads at a glance: a layers x heads grid, each cell in its kind's colour, as deep as that score.
    Drawn with Pillow: matplotlib's drawing was most of what the head scores cost (docs/heads.md)."""

    CELL_W, CELL_H, LEFT, TOP, BOTTOM = 84, 44, 58, 22, 20  # pixels

    def __init__(self, layers: int, heads: int):
        from PIL import ImageFont

        self.layers, self.heads = layers, heads
        self.font = ImageFont.load_default(size=12)
        self.size = (self.LEFT + heads * self.CELL_W + 8, self.TOP + layers * self.CELL_H + self.BOTTOM)

    def render(self, result, title: str) -> np.ndarray:  # result: src.model.head_scores.HeadScores
        """The grid for `result` -> an (height, width, 3) uint8 RGB array."""
        from PIL import Image, ImageDraw

        image = Image.new("RGB", self.size, "white")
        draw = ImageDraw.Draw(image)
        draw.text((self.size[0] / 2, 4), title, fill="black", font=self.font, anchor="ma")
        scores = {kind: result.scores[kind].tolist() for kind in KIND_COLOURS}  # [layer][head] floats
        for layer, row in enumerate(result.kinds()):
            y = self.TOP + layer * self.CELL_H
            draw.text((self.LEFT - 8, y + self.CELL_H / 2), f"layer {layer}", fill="black", font=self.font, anchor="rm")
            for head, kind in enumerate(row):
                x = self.LEFT + head * self.CELL_W
                if kind is None:
                    best = max(scores[k][layer][head] for k in KIND_COLOURS)
                    words, ink, cell = f"-\n{best:.2f}", "grey", (255, 255, 255)
                else:
                    score = scores[kind][layer][head]
                    depth = min(score, 1.0)  # white at 0, the kind's colour at 1
                    cell = tuple(round(255 * (1 - depth * (1 - c))) for c in KIND_COLOURS[kind])
                    words, ink = f"{KIND_SHORT[kind]}\n{score:.2f}", "white" if score > 0.6 else "black"
                draw.rectangle((x, y, x + self.CELL_W - 1, y + self.CELL_H - 1), fill=cell)
                centre = (x + self.CELL_W / 2, y + self.CELL_H / 2)
                draw.multiline_text(centre, words, fill=ink, font=self.font, anchor="mm", align="center")
        bottom = self.TOP + self.layers * self.CELL_H
        draw.rectangle((self.LEFT - 1, self.TOP - 1, self.LEFT + self.heads * self.CELL_W, bottom), outline="black")
        for head in range(self.heads):
            centre = (self.LEFT + (head + 0.5) * self.CELL_W, bottom + 4)
            draw.text(centre, f"head {head}", fill="black", font=self.font, anchor="ma")
        return np.array(image)  # (height, width, 3) uint8, writable


def save_png(fig: Figure, path: str) -> None:
    """At the figure's exact size (figsize x DPI), so the pixel size is predictable."""
    fig.savefig(path, dpi=DPI, format="png")
    plt.close(fig)
