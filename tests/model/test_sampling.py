"""Generation: cropping to the window, the KV cache, and argument checks."""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from src.model.checks import sampling
from src.model.generation import (
    fastest_thread_count,
    generate,
    next_token_distribution,
    sample_from,
    sample_generators,
    stream,
)
from src.model.kv_cache import KVCache
from tests.model.compare import assert_close
from tests.model.tiny_models import VOCAB, tiny_model


@pytest.mark.parametrize("fused", [False, True])
def test_kv_cache_generation_equals_uncached_also_past_the_window(kind, fused):
    model = tiny_model(kind, fused)
    prompt = torch.randint(0, VOCAB, (2, 3), generator=torch.Generator().manual_seed(0))
    n = 3 * model.context_window  # well past the window
    cached = generate(model, prompt, n, greedy=True, use_cache=True)
    uncached = generate(model, prompt, n, greedy=True, use_cache=False)
    assert cached.shape == (2, 3 + n)
    assert_close(cached, uncached)


def test_cached_sampling_reproduces_uncached_with_the_same_generator():
    model = tiny_model("gpt")
    prompt = torch.tensor([1, 2, 3])
    runs = [
        generate(model, prompt, 30, temperature=0.9, top_k=5, use_cache=c, generator=torch.Generator().manual_seed(7))
        for c in (True, False)
    ]
    assert_close(runs[0], runs[1])


def test_kv_cache_update_returns_the_positions_so_far_and_refuses_more_than_max_len():
    torch.manual_seed(0)
    cache = KVCache(num_layers=2, batch_size=1, num_heads=2, max_len=5, d_head=3)
    K, V = torch.randn(1, 2, 3, 3), torch.randn(1, 2, 3, 3)  # 3 positions
    keys, values = cache.update(1, K, V)
    assert_close(keys, K)  # the 3 filled positions, not the 5 slots
    assert_close(values, V)
    assert cache.length == 0  # advance() moves it, once every layer has run
    assert_close(cache.keys[0], torch.zeros(1, 2, 5, 3))  # layer 0's slots untouched
    cache.advance(3)
    K_new, V_new = torch.randn(1, 2, 2, 3), torch.randn(1, 2, 2, 3)  # 2 more: 5, the whole cache
    keys, values = cache.update(1, K_new, V_new)
    assert_close(keys, torch.cat([K, K_new], dim=2))
    assert_close(values, torch.cat([V, V_new], dim=2))
    cache.advance(2)
    with pytest.raises(ValueError):  # a sixth position: refused, not dropped or written past the end
        cache.update(1, K_new[:, :, :1], V_new[:, :, :1])


def test_a_prompt_longer_than_the_window_is_cropped():
    model = tiny_model("gpt")
    long_prompt = torch.randint(0, VOCAB, (model.context_window * 2,))
    out = generate(model, long_prompt, 5, greedy=True)
    assert out.shape == (model.context_window * 2 + 5,)
    assert torch.equal(out[: len(long_prompt)], long_prompt)


def test_temperature_zero_is_greedy_and_the_model_mode_is_restored():
    model = tiny_model("gpt").train()
    prompt = torch.tensor([4, 5])
    a = generate(model, prompt, 10, temperature=0.0)
    b = generate(model, prompt, 10, greedy=True)
    assert torch.equal(a, b) and model.training


def test_top_k_and_top_p_keep_only_the_likely_tokens():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    assert torch.equal(next_token_distribution(logits, top_k=2) > 0, torch.tensor([[True, True, False, False]]))
    nucleus = next_token_distribution(logits, top_p=0.7)
    assert torch.equal(nucleus > 0, torch.tensor([[True, True, False, False]]))
    assert torch.allclose(nucleus.sum(), torch.tensor(1.0))
    assert torch.equal(next_token_distribution(logits, top_p=0.1) > 0, torch.tensor([[True, False, False, False]]))


@pytest.mark.parametrize(
    "kwargs,name",
    [
        (dict(max_new_tokens=-1), "max_new_tokens"),
        (dict(temperature=-0.5), "temperature"),
        (dict(top_k=0), "top_k"),
        (dict(top_p=0.0), "top_p"),
        (dict(top_p=1.5), "top_p"),
    ],
)
def test_invalid_arguments_name_the_argument(kwargs, name):
    model = tiny_model("gpt")
    args = dict(max_new_tokens=5) | kwargs
    with pytest.raises(ValueError, match=name):
        generate(model, torch.tensor([1]), **args)


@given(
    max_new_tokens=st.integers(-5, 5),
    temperature=st.floats(-2, 2) | st.just(float("nan")),
    top_k=st.none() | st.integers(-3, 3),
    top_p=st.none() | st.floats(-1, 2, allow_nan=False),
)
def test_argument_validation_accepts_exactly_the_valid_region(max_new_tokens, temperature, top_k, top_p):
    valid = (
        max_new_tokens >= 0 and temperature >= 0 and (top_k is None or top_k >= 1) and (top_p is None or 0 < top_p <= 1)
    )
    if valid:
        sampling("", max_new_tokens, temperature, top_k, top_p)
    else:
        with pytest.raises(ValueError):
            sampling("", max_new_tokens, temperature, top_k, top_p)


def test_sampling_draws_each_token_with_its_probability():
    probs = torch.tensor([0.5, 0.3, 0.15, 0.05, 0.0])
    draws = sample_from(probs.expand(40_000, 5), torch.Generator().manual_seed(0)).flatten()
    freq = torch.bincount(draws, minlength=5) / len(draws)
    assert torch.allclose(freq, probs, atol=0.01)  # ~4 standard errors at 40k draws
    assert freq[4] == 0  # impossible tokens never come out


def test_a_model_trained_on_the_plain_path_samples_the_same_ids_on_the_fused_kernels():
    model = tiny_model("gpt", fused=False)
    prompt = torch.tensor([[1, 2, 3]])
    n = 3 * model.context_window
    fast, reference = (
        generate(model, prompt, n, temperature=1.0, use_cache=c, generator=torch.Generator().manual_seed(3))
        for c in (True, False)
    )
    assert torch.equal(fast, reference)
    assert not any(getattr(m, "fused", False) for m in model.modules())  # the switch is undone


def test_each_sample_of_a_batch_is_what_its_seed_gives_alone(kind):
    model = tiny_model(kind)
    prompt = torch.tensor([4, 1, 7])
    n = 2 * model.context_window
    batch = generate(model, prompt.expand(3, -1), n, temperature=1.0, generator=sample_generators(5, 3, "cpu"))
    for i in range(3):
        alone = generate(model, prompt, n, temperature=1.0, generator=sample_generators(5 + i, 1, "cpu"))
        assert torch.equal(batch[i], alone)
    assert not torch.equal(batch[0], batch[1])


def test_stream_yields_each_token_as_it_is_drawn_and_cleans_up_when_stopped():
    model = tiny_model("gpt").train()
    threads = torch.get_num_threads()
    full = generate(model, torch.tensor([2, 3]), 30, greedy=True)
    tokens = stream(model, torch.tensor([[2, 3]]), 30, greedy=True)
    first = [next(tokens) for _ in range(20)]  # 20 tokens in: past the window of 12
    assert torch.equal(torch.cat(first), full[2:22])
    tokens.close()  # the caller stops early
    assert model.training and torch.get_num_threads() == threads and torch.is_grad_enabled()


def test_the_thread_probe_picks_one_of_the_two():
    threads = torch.get_num_threads()
    try:
        assert fastest_thread_count(lambda: torch.randn(64, 64) @ torch.randn(64, 64), 2) in (1, 2)
        assert fastest_thread_count(lambda: None, 1) == 1
    finally:
        torch.set_num_threads(threads)
