"""The attention formulas against the notes' worked numbers and against PyTorch's kernel."""

import math

import pytest
import torch
import torch.nn.functional as F

from src.model.attention import (
    MultiHeadAttention,
    SingleHeadSelfAttention,
    attention_without_parameters,
    causal_mask,
    scaled_dot_product_attention,
    softmax,
)
from tests.model.compare import assert_close

INF = float("inf")


def test_worked_example_of_the_notes():
    X = torch.tensor([[1.0, 0, 0], [0, 1, 0], [0, 0, 1], [1, 1, 1]])  # Q = K = V = X, d_head 3
    context, weights = attention_without_parameters(X)
    # Row 3 by hand: scores [0, 0, 1] / sqrt(3), the fourth masked -> [1, 1, e, 0] / (2 + e).
    e = math.exp(1 / math.sqrt(3))
    exact = torch.tensor([1 / (2 + e), 1 / (2 + e), e / (2 + e), 0.0])  # [0.26446, 0.26446, 0.47108, 0]
    assert_close(weights[2], exact, atol=1e-3, rtol=0)
    # The notes print them rounded as [0.265, 0.265, 0.47, 0]: equal at the printed precision.
    for w, printed, decimals in zip(weights[2].tolist(), [0.265, 0.265, 0.47, 0.0], [3, 3, 2, 0], strict=True):
        assert abs(w - printed) <= 0.5 * 10**-decimals + 1e-4
    assert_close(context[2], weights[2] @ X)
    assert_close(weights[0], torch.tensor([1.0, 0, 0, 0]))  # the first row sees itself only


def test_mask_of_five_positions_matches_the_notes():
    mask = causal_mask(5)
    assert mask.shape == (1, 1, 5, 5) and mask.dtype == torch.bool
    additive = torch.zeros(5, 5).masked_fill(mask[0, 0], -INF)
    expected = torch.tensor(
        [
            [0, -INF, -INF, -INF, -INF],
            [0, 0, -INF, -INF, -INF],
            [0, 0, 0, -INF, -INF],
            [0, 0, 0, 0, -INF],
            [0, 0, 0, 0, 0],
        ]
    )
    assert_close(additive, expected)
    assert_close(mask[0, 0], torch.ones(5, 5, dtype=torch.bool).triu(1))
    assert causal_mask(3).expand(2, 4, 3, 3).shape == (2, 4, 3, 3)  # broadcasts to (B, h, T, T)


def test_a_sliding_window_also_masks_the_keys_older_than_w():
    mask = causal_mask(5, window=2)
    assert mask.shape == (1, 1, 5, 5) and mask.dtype == torch.bool
    i, j = torch.arange(5).view(5, 1), torch.arange(5).view(1, 5)
    assert_close(mask[0, 0], (j > i) | (j <= i - 2))  # query i sees keys i-1 and i only


def test_masking_after_the_softmax_is_wrong():
    torch.manual_seed(0)
    scores = torch.randn(6, 6)
    mask = causal_mask(6)[0, 0]
    right = softmax(scores.masked_fill(mask, -INF))
    naive = softmax(scores).masked_fill(mask, 0.0)  # the "naive mask": too late
    assert_close(right.sum(-1), torch.ones(6))
    assert torch.all(right[mask] == 0)
    naive_sums = naive.sum(-1)
    assert torch.all(naive_sums[:-1] < 1 - 1e-3)  # rows no longer sum to 1 ...
    assert torch.isclose(naive_sums[-1], torch.tensor(1.0))  # ... except the last, which masks nothing
    assert not torch.allclose(naive, right, atol=1e-3)
    assert_close(right, naive / naive_sums[:, None], atol=1e-6, rtol=1e-5)  # renormalising repairs it


def test_softmax_matches_torch_and_survives_large_scores():
    torch.manual_seed(0)
    s = torch.randn(4, 7, 9) * 30
    assert_close(softmax(s), torch.softmax(s, dim=-1), atol=1e-6, rtol=1e-5)
    big = torch.tensor([[1000.0, 1000.0, -INF]])
    assert_close(softmax(big), torch.tensor([[0.5, 0.5, 0.0]]))


def test_plain_attention_equals_torch_kernel():
    torch.manual_seed(0)
    Q, K, V = (torch.randn(2, 3, 8, 4) for _ in range(3))
    context, weights = scaled_dot_product_attention(Q, K, V, causal_mask(8))
    expected = F.scaled_dot_product_attention(Q, K, V, is_causal=True)
    assert_close(context, expected, atol=1e-6, rtol=1e-5)
    assert_close(weights.sum(-1), torch.ones(2, 3, 8))


def test_dropout_drops_the_weights_in_training_only():
    torch.manual_seed(0)
    Q, K, V = (torch.randn(2, 3, 8, 4) for _ in range(3))
    mask = causal_mask(8)
    plain, weights = scaled_dot_product_attention(Q, K, V, mask)
    evaluated, _ = scaled_dot_product_attention(Q, K, V, mask, dropout=0.5, training=False)
    assert_close(evaluated, plain)  # no dropout at evaluation
    torch.manual_seed(1)
    trained, trained_weights = scaled_dot_product_attention(Q, K, V, mask, dropout=0.5, training=True)
    torch.manual_seed(1)  # the same draw: dropout is the only random step
    dropped = F.dropout(weights, p=0.5)
    assert_close(trained_weights, dropped)  # the weights dropped (the rest scaled by 2) ...
    assert_close(trained, dropped @ V)  # ... and the context is the dropped weights times V


def test_single_head_shapes_and_trace(capsys):
    head = SingleHeadSelfAttention(d_model=12, d_k=5, trace_shapes=True)
    out, weights = head(torch.randn(2, 7, 12))
    assert out.shape == (2, 7, 5) and weights.shape == (2, 7, 7)
    printed = capsys.readouterr().out
    for line in ["X: (2, 7, 12)", "Q: (2, 7, 5)", "weights: (2, 7, 7)", "out: (2, 7, 5)"]:
        assert line in printed
    assert torch.all(weights.triu(1) == 0)


def test_heads_are_split_by_reshape_and_transpose():
    mha = MultiHeadAttention(d_model=12, num_heads=3)
    X = torch.arange(2 * 5 * 12, dtype=torch.float).reshape(2, 5, 12)
    split = mha.split_heads(X)
    assert split.shape == (2, 3, 5, 4)
    assert_close(split[1, 2, 3], X[1, 3, 8:12])  # head 2 owns columns 8..11
    assert_close(mha.merge_heads(split), X)
    keys = mha.split_heads(X[..., :8], num_heads=2)  # two key/value heads (GQA): num_heads given
    assert keys.shape == (2, 2, 5, 4)
    assert_close(keys[1, 1, 3], X[1, 3, 4:8])


def test_multi_head_equals_separate_heads_concatenated():
    torch.manual_seed(0)
    d, h = 12, 3
    mha = MultiHeadAttention(d, h)
    X = torch.randn(2, 6, d)
    out, weights = mha(X, need_weights=True)
    heads = []
    for i in range(h):
        cols = slice(i * 4, (i + 1) * 4)
        Q, K, V = X @ mha.W_Q[:, cols], X @ mha.W_K[:, cols], X @ mha.W_V[:, cols]
        context, w = scaled_dot_product_attention(Q, K, V, causal_mask(6)[0])
        assert_close(w, weights[:, i], atol=1e-6, rtol=1e-5)
        heads.append(context)
    assert_close(out, torch.cat(heads, dim=-1) @ mha.W_O, atol=1e-6, rtol=1e-5)


def test_embedding_dim_must_divide_into_heads():
    with pytest.raises(ValueError, match=r"embedding_dim \(64\) must be divisible by num_heads \(6\)"):
        MultiHeadAttention(64, 6)


@pytest.mark.parametrize("bias", [False, True])
def test_fused_attention_equals_plain(bias):
    torch.manual_seed(0)
    plain = MultiHeadAttention(16, 4, bias=bias)
    fused = MultiHeadAttention(16, 4, bias=bias, fused=True)
    fused.load_state_dict(plain.state_dict())
    X = torch.randn(3, 9, 16)
    out_p, w = plain(X)
    out_f, none = fused(X)
    assert w is not None and none is None  # only the plain path can return the weights
    assert_close(out_p, out_f, atol=1e-6, rtol=1e-5)
