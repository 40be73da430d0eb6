"""The attention figure redrawn in place draws the same pixels as a fresh one."""

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch

from src.plots import AttentionFigure, attention_figure


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
