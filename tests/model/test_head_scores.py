"""Head scores: hand-set attention patterns give known scores; models of both kinds; plain path == hooks."""

import math

import pytest
import torch

from src.model import GPT, GPTConfig, MultiHeadAttention, SeedGPT, SeedGPTConfig, causal_mask
from src.model.head_scores import (
    THRESHOLD,
    HeadScores,
    ProbeTooShort,
    attention_distance,
    duplicate_token_score,
    first_token_score,
    in_context_probe,
    induction_score,
    measure_heads,
    previous_token_score,
    repeated_probe,
    score_heads,
)

VOCAB = 23


def pattern(T: int, key_of) -> torch.Tensor:
    """(1, 1, T, T) weights putting all of row i on key_of(i)."""
    A = torch.zeros(1, 1, T, T)
    for i in range(T):
        A[0, 0, i, key_of(i)] = 1.0
    return A


def uniform(T: int) -> torch.Tensor:
    """(1, 1, T, T): A[i, j] = 1/(i+1) for j <= i, the causal uniform head."""
    A = (~causal_mask(T)).float()
    return A / A.sum(dim=-1, keepdim=True)


def model(kind: str, **options):
    torch.manual_seed(0)
    if kind == "seed":
        return SeedGPT(SeedGPTConfig(vocab_size=VOCAB, context_window=10, embedding_dim=12, num_heads=3, **options))
    return GPT(GPTConfig(vocab_size=VOCAB, context_window=16, embedding_dim=16, num_heads=4, num_layers=2, **options))


def test_a_previous_token_head_scores_one_and_no_induction():
    n = 8
    A = pattern(2 * n, lambda i: max(i - 1, 0))
    assert previous_token_score(A).item() == 1.0
    assert induction_score(A, n).item() == 0.0
    assert duplicate_token_score(A, n).item() == 0.0
    assert first_token_score(A).item() == pytest.approx(1 / (2 * n - 1))  # only i = 1 looks at 0
    assert attention_distance(A).item() == pytest.approx((2 * n - 1) / (2 * n))  # 1 everywhere but i = 0


def test_an_induction_head_scores_one_and_a_duplicate_head_scores_one():
    n = 8
    # The first copy looks back one token; the second looks at the token after its first occurrence.
    induction = pattern(2 * n, lambda i: i - n + 1 if i >= n else max(i - 1, 0))
    assert induction_score(induction, n).item() == 1.0
    assert duplicate_token_score(induction, n).item() == 0.0
    duplicate = pattern(2 * n, lambda i: i - n if i >= n else i)
    assert duplicate_token_score(duplicate, n).item() == 1.0
    assert induction_score(duplicate, n).item() == 0.0


def test_a_first_token_head():
    A = pattern(12, lambda i: 0)
    assert first_token_score(A).item() == 1.0
    assert attention_distance(A).item() == pytest.approx(sum(range(12)) / 12)


def test_uniform_attention_scores_the_exact_means_of_one_over_i_plus_one():
    n = 8
    T = 2 * n
    A = uniform(T)
    assert previous_token_score(A).item() == pytest.approx(sum(1 / (i + 1) for i in range(1, T)) / (T - 1))
    assert first_token_score(A).item() == pytest.approx(sum(1 / (i + 1) for i in range(1, T)) / (T - 1))
    second_copy = sum(1 / (i + 1) for i in range(n, T)) / n
    assert induction_score(A, n).item() == pytest.approx(second_copy)
    assert duplicate_token_score(A, n).item() == pytest.approx(second_copy)
    assert attention_distance(A).item() == pytest.approx(sum(i / 2 for i in range(T)) / T)  # mean of 0..i is i/2


def test_scores_are_per_head_and_per_layer():
    n = 4
    heads = torch.cat([pattern(2 * n, lambda i: max(i - 1, 0)), uniform(2 * n)], dim=1)  # (1, 2, T, T)
    scores = score_heads([heads, heads.flip(1)], n)
    assert scores["previous_token"].shape == (2, 2)
    assert scores["previous_token"][0, 0] == 1.0 and scores["previous_token"][1, 1] == 1.0
    assert scores["previous_token"][0, 1] < 0.5


def test_the_probe_is_a_string_written_twice_fixed_by_its_seed():
    probe = repeated_probe(VOCAB, 16, batch=5, seed=3)
    assert probe.shape == (5, 16)
    assert torch.equal(probe[:, :8], probe[:, 8:])
    assert all(len(set(row[:8].tolist())) == 8 for row in probe)  # distinct tokens: 23 >= 8
    assert torch.equal(probe, repeated_probe(VOCAB, 16, batch=5, seed=3))
    assert not torch.equal(probe, repeated_probe(VOCAB, 16, batch=5, seed=4))
    small = repeated_probe(3, 17, batch=2)  # fewer tokens than n: drawn with repeats; odd window: 2n = 16
    assert small.shape == (2, 16) and int(small.max()) < 3
    with pytest.raises(ProbeTooShort, match="context_window >= 4"):
        repeated_probe(VOCAB, 3)


def test_in_context_score_of_a_perfect_copier_is_minus_the_first_copy_loss():
    n, V = 5, 7
    probe = repeated_probe(V, 2 * n, batch=3)
    logits = torch.zeros(3, 2 * n, V)  # uniform: CE = ln V everywhere
    assert in_context_probe(logits, probe, n) == pytest.approx(0.0)
    logits[:, n:-1] = -1e4  # the second copy's next token known for sure: CE = 0 there
    logits[torch.arange(3)[:, None], torch.arange(n, 2 * n - 1), probe[:, n + 1 :]] = 0.0
    assert in_context_probe(logits, probe, n) == pytest.approx(-math.log(V), abs=1e-5)


@pytest.mark.parametrize("kind", ["seed", "gpt"])
def test_a_model_with_zero_queries_and_keys_attends_uniformly_and_scores_so(kind):
    m = model(kind)
    with torch.no_grad():
        for module in m.modules():
            if isinstance(module, MultiHeadAttention):
                module.W_Q.zero_()
                module.W_K.zero_()
    probe = repeated_probe(VOCAB, m.context_window, batch=4)
    T = probe.shape[1]
    n = T // 2
    result = measure_heads(m, probe)
    layers, heads = result.scores["induction"].shape
    assert (layers, heads) == (m.num_layers, m.cfg.num_heads)
    expected = {
        "previous_token": sum(1 / (i + 1) for i in range(1, T)) / (T - 1),
        "induction": sum(1 / (i + 1) for i in range(n, T)) / n,
        "attention_distance": (T - 1) / 4,
    }
    for name, value in expected.items():
        assert torch.allclose(result.scores[name], torch.full((layers, heads), value), atol=1e-6), name
    assert all(kind is None for row in result.kinds() for kind in row)  # below THRESHOLD: no kind
    assert len(result.probe_maps) == layers and result.probe_maps[0].shape == (heads, T, T)


@pytest.mark.parametrize("kind", ["seed", "gpt"])
@pytest.mark.parametrize("fused", [False, True])
def test_scores_from_the_plain_path_equal_weights_recomputed_from_hooks(kind, fused):
    m = model(kind, fused=fused).eval()
    inputs: list[torch.Tensor] = []
    attention = [module for module in m.modules() if isinstance(module, MultiHeadAttention)]
    hooks = [a.register_forward_hook(lambda mod, args, out: inputs.append(args[0])) for a in attention]
    probe = repeated_probe(VOCAB, m.context_window, batch=6, seed=1)
    result = measure_heads(m, probe)
    for hook in hooks:
        hook.remove()
    recomputed = []
    for module, X in zip(attention, inputs, strict=True):  # X: the attention's input (B, T, d)
        B, T, d = X.shape
        h = module.num_heads
        Q = (X @ module.W_Q).view(B, T, h, d // h).transpose(1, 2)
        K = (X @ module.W_K).view(B, T, h, d // h).transpose(1, 2)
        scores = Q @ K.transpose(-2, -1) / math.sqrt(d // h)
        scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
        recomputed.append(torch.softmax(scores, dim=-1))
    expected = score_heads(recomputed, probe.shape[1] // 2)
    for name, value in result.scores.items():
        assert torch.allclose(value, expected[name], atol=1e-6), name
    assert torch.allclose(result.probe_maps[0], recomputed[0][0], atol=1e-6)


def test_kinds_take_the_strongest_score_over_the_threshold():
    scores = {
        "previous_token": torch.tensor([[0.9, 0.1, 0.3]]),
        "duplicate_token": torch.tensor([[0.0, 0.1, 0.1]]),
        "induction": torch.tensor([[0.5, 0.7, THRESHOLD - 0.01]]),
        "first_token": torch.tensor([[0.0, 0.0, 0.0]]),
        "attention_distance": torch.tensor([[1.0, 5.0, 2.0]]),
    }
    result = HeadScores(scores, in_context=-1.0, in_context_text=None, probe_maps=[])
    assert result.kinds() == [["previous_token", "induction", None]]
    summary = result.summary()
    assert summary["previous_token_heads"] == 1 and summary["induction_heads"] == 1
    assert summary["duplicate_token_heads"] == 0 and summary["best_induction"] == pytest.approx(0.7)


def test_mlp_ratio_zero_is_an_attention_only_transformer():
    m = model("gpt", mlp_ratio=0)
    assert not any("mlp" in name or "ln_2" in name for name, _ in m.named_parameters())
    block = m.blocks[0]
    X = torch.randn(2, 5, 16)
    attended, _ = block.attention(block.ln_1(X))
    assert torch.allclose(block(X)[0], X + attended)  # X_l = X_{l-1} + Attention(LN(X_{l-1})), nothing more
    with pytest.raises(ValueError, match="model.mlp_ratio must be a non-negative integer"):
        model("gpt", mlp_ratio=-1)
