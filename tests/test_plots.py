"""The attention figure redrawn in place draws the same pixels as a fresh one; a sweep's job labels never touch."""

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch

from src.plots import AttentionFigure, attention_figure
from src.sweeps import analysis as sweep_analysis
from src.sweeps.figure import sweep_figure


def causal_weights(heads: int, T: int, seed: int) -> torch.Tensor:
    scores = torch.randn(heads, T, T, generator=torch.Generator().manual_seed(seed))
    return scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf")).softmax(-1)


def drawn(figure) -> np.ndarray:
    figure.canvas.draw()
    return np.asarray(figure.canvas.buffer_rgba())[..., :3]


@pytest.mark.parametrize("prompt", ["First Citizen:\nBefore we proceed", "天地玄黄🙂 ab", "x" * 50])
def test_redrawn_figure_equals_a_fresh_one_pixel_for_pixel(prompt):
    tokens = list(prompt)
    figure = AttentionFigure(3, tokens)
    try:
        for layer, seed in [(0, 1), (3, 2), (1, 3)]:  # each layer in turn, as at every validation
            weights = causal_weights(3, len(tokens), seed)
            title = f"layer {layer} at step {100 * seed}"
            fresh = attention_figure([weights], tokens, title, layer_numbers=[layer])
            assert np.array_equal(figure.render(weights, layer, title), drawn(fresh))
            plt.close(fresh)
    finally:
        figure.close()


def test_no_two_job_labels_of_a_12_job_sweep_figure_touch():
    """The notes' 12-job grid (4 widths x 3 head counts): three jobs share each width and sit close
    together, where two-digit labels ("10", "11") used to run into each other."""
    rows = [
        {
            "job": 3 * i + h,
            "status": "ok",
            "best_val_loss": 2.0 + 300 / d + 0.02 * h,
            "parameters": 12 * d * d + 65 * d,
            "overrides": [f"model.embedding_dim={d}", f"model.num_heads={h + 1}"],
        }
        for i, d in enumerate((30, 60, 90, 120))
        for h in range(3)
    ]
    fit, residuals, _ = sweep_analysis.scaling(rows)
    figure = sweep_figure(rows, ["model.embedding_dim", "model.num_heads"], fit, residuals)
    try:
        renderer = figure.canvas.get_renderer()
        for ax in figure.axes:
            labels = [t.get_window_extent(renderer) for t in ax.texts]
            assert len(labels) == 12
            touching = [(a, b) for i, a in enumerate(labels) for b in labels[i + 1 :] if a.overlaps(b)]
            assert not touching, f"{ax.get_xlabel()}: job labels overlap"
    finally:
        plt.close(figure)
