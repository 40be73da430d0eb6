"""Sampling where float32 ends: any positive temperature gives a distribution, never NaN.

Issue 37 item 12: `generate temperature=1e-39` (positive, below float32's smallest normal number)
divided the logits into inf, softmax gave NaN and every draw was id 0 (20 newlines, exit 0).
"""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from src.model.generation import GREEDY_BELOW, generate, next_token_distribution
from tests.model.tiny_models import tiny_model


@given(
    temperature=st.floats(min_value=0.0, max_value=1e30, allow_subnormal=True),
    scale=st.sampled_from([1e-3, 1.0, 50.0, 1e4]),
    seed=st.integers(0, 2**16),
)
def test_every_temperature_gives_a_distribution_and_tiny_ones_are_greedy(temperature, scale, seed):
    logits = torch.randn(3, 11, generator=torch.Generator().manual_seed(seed)) * scale
    probs = next_token_distribution(logits, temperature, top_k=5, top_p=0.9)
    assert torch.isfinite(probs).all() and torch.allclose(probs.sum(-1), torch.ones(3))
    if temperature < GREEDY_BELOW:
        assert torch.equal(probs.argmax(-1), logits.argmax(-1)) and torch.equal(probs.max(-1).values, torch.ones(3))


@pytest.mark.parametrize("temperature", [1e-39, 1e-45, 1e-300, 5e-324])
def test_a_temperature_below_float32s_smallest_normal_samples_greedily(temperature):
    model = tiny_model("gpt")
    prompt = torch.tensor([4, 5])
    drawn = generate(model, prompt, 12, temperature=temperature, generator=torch.Generator().manual_seed(0))
    assert torch.equal(drawn, generate(model, prompt, 12, greedy=True))
