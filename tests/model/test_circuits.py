"""Circuits read from the weights: equal to TransformerLens's own on the exported model, known values on
hand-built heads, and every model option gives finite circuits of the right shapes."""

import math

import pytest
import torch

from src.model import GPT, GPTConfig
from src.model.circuits import (
    bigram_log_probs,
    circuits,
    composition_scores,
    correlation,
    direct_path,
    ov_circuit,
    positional_qk,
    positivity,
    qk_circuit,
)
from tests.model.tiny_models import ALL_SWITCHES, VOCAB, seed_switches, tiny_model


def shaken(model: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """The model with every weight (gains and biases too) moved far from its initial value, in eval mode."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.2)
    return model.eval()


@pytest.mark.parametrize(
    "options",
    [
        {"positional": "learned", "tie_weights": True},
        {"positional": "sinusoidal", "tie_weights": False, "bias": True, "mlp_ratio": 0},
    ],
)
def test_every_circuit_equals_transformerlens_on_the_exported_model(tmp_path, monkeypatch, options):
    from src.export.hf import write_hf
    from src.export.lens import boot

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    model = shaken(tiny_model("gpt", **options))
    write_hf(model, [chr(ord("a") + i) for i in range(VOCAB)], tmp_path)
    bridge = boot(tmp_path)
    bridge.enable_compatibility_mode(disable_warnings=True)  # fold_ln, centre writing weights and unembed
    ours = circuits(model)
    d_head = model.cfg.embedding_dim // model.cfg.num_heads
    with torch.no_grad():
        W_E, W_U, W_pos = bridge.W_E, bridge.W_U, bridge.W_pos
        theirs = {
            "direct": W_E @ W_U,
            "qk": (W_E @ bridge.QK @ W_E.T).AB / math.sqrt(d_head),  # TL's QK leaves the scale out
            "ov": (W_E @ bridge.OV @ W_U).AB,
            "positional": (W_pos @ bridge.QK @ W_pos.T).AB / math.sqrt(d_head),
        }
        theirs["composition"] = {k: bridge.all_composition_scores(k.upper()).scores for k in "qkv"}
    for name in ("direct", "qk", "ov", "positional"):
        assert ours[name].shape == theirs[name].shape
        assert theirs[name].abs().max() > 0.05  # real values, not near zero
        assert torch.allclose(ours[name], theirs[name], atol=1e-5, rtol=1e-5), (name, ours[name] - theirs[name])
    for key, scores in theirs["composition"].items():
        assert scores[0, :, 1].min() > 0.05
        assert torch.allclose(ours["composition"][key], scores, atol=1e-5, rtol=0), key
    # The one-head functions are the bundle's entries.
    assert torch.equal(qk_circuit(model, 1, 2), ours["qk"][1, 2])
    assert torch.equal(ov_circuit(model, 0, 3), ours["ov"][0, 3])
    assert torch.equal(positional_qk(model, 1, 0), ours["positional"][1, 0])
    assert torch.equal(direct_path(model), ours["direct"])
    assert all(torch.equal(composition_scores(model)[k], ours["composition"][k]) for k in "qkv")


def copying_gpt(vocab: int = 8, d: int = 16) -> GPT:
    """One layer, one head, W_V = W_O = I and orthonormal embedding rows, tied: W_OV is the identity through
    the embedding. RMSNorm without gains, so no norm changes a direction."""
    cfg = GPTConfig(vocab_size=vocab, context_window=8, embedding_dim=d, num_heads=1, num_layers=1, mlp_ratio=0)
    model = GPT(GPTConfig(**{**vars(cfg), "positional": "learned", "norm": "rms", "norm_gain": False}))
    with torch.no_grad():
        Q, _ = torch.linalg.qr(torch.randn(d, vocab, generator=torch.Generator().manual_seed(0)))
        model.embedding.E.copy_(Q.t())  # (V, d), orthonormal rows
        attention = model.blocks[0].attention
        attention.W_V.copy_(torch.eye(d))
        attention.W_O.copy_(torch.eye(d))
    return model


def test_a_copying_head_has_ov_positivity_one_and_its_negation_minus_one():
    model = copying_gpt()
    ov = ov_circuit(model, 0, 0)
    # E E^T = I, the unembedding centred over the vocabulary: I - 11^T/V, eigenvalues 1 and one 0.
    assert torch.allclose(ov, torch.eye(8) - 1 / 8, atol=1e-6)
    assert positivity(ov) == pytest.approx(1.0, abs=1e-6)
    assert circuits(model)["positivity"]["ov"][0, 0].item() == pytest.approx(1.0, abs=1e-6)
    with torch.no_grad():
        model.blocks[0].attention.W_O.neg_()
    assert positivity(ov_circuit(model, 0, 0)) == pytest.approx(-1.0, abs=1e-6)


def test_a_previous_token_head_feeding_an_induction_head_composes_above_every_random_pair():
    """Layer 0 head 0 writes the token (dims 0-7) into dims 8-15; layer 1 head 0's key reads dims 8-15 and its
    query dims 0-7: W_OV W_K W_Q^T = I on dims 0-7, K-composition 1/sqrt(8). Every other head is random."""
    torch.manual_seed(0)
    d, r = 64, 8
    cfg = GPTConfig(vocab_size=VOCAB, context_window=8, embedding_dim=d, num_heads=d // r, num_layers=2, mlp_ratio=0)
    model = GPT(GPTConfig(**{**vars(cfg), "norm": "rms", "norm_gain": False}))
    token, before = torch.eye(d)[:, :r], torch.eye(d)[:, r : 2 * r]  # (d, r): the two subspaces
    with torch.no_grad():
        first, second = model.blocks[0].attention, model.blocks[1].attention
        first.W_V[:, :r] = token
        first.W_O[:r] = before.t()
        second.W_Q[:, :r] = token
        second.W_K[:, :r] = before
    K = composition_scores(model)["k"]
    assert K[0, 0, 1, 0].item() == pytest.approx(1 / math.sqrt(r), abs=1e-5)
    others = K[0, :, 1].clone()
    others[0, 0] = 0
    assert K[0, 0, 1, 0] > others.max()
    assert K[1].abs().max() == 0 and K[:, :, 0].abs().max() == 0  # zero where l2 <= l1


def test_the_seed_models_ov_circuits_are_the_logits_of_a_repeated_token():
    """Seed model, rope (no positional code added), no LN gain or bias: a window of one token a repeated gives
    every head the same value at every position, so the logits are LN(E[a]) sum_h W_V^h W_O^h W_out + b_out,
    and LN(E[a]) = W_E[a] (centred) / sigma_a: sum_h OV^h[a] / sigma_a + b_out, up to a constant per row."""
    model = shaken(tiny_model("seed", positional="rope", ln_affine=False, num_kv_heads=1))
    ov = circuits(model)["ov"].sum(dim=1)[0]  # (V, V): sum over heads
    assert circuits(model)["direct"] is None and direct_path(model) is None  # no residual stream
    tokens = torch.arange(VOCAB)[:, None].repeat(1, 4)  # (V, 4): row a is a a a a
    with torch.no_grad():
        logits, _ = model(tokens)
        x = model.embedding.E * model.embedding.scale
        sigma = torch.sqrt(x.var(dim=-1, unbiased=False) + model.ln.eps)  # (V,)
    expected = logits[:, -1] - model.b_out  # b_out: the same for every token, no part of a circuit
    expected = expected - expected.mean(dim=-1, keepdim=True)
    assert torch.allclose(ov / sigma[:, None], expected, atol=1e-5, rtol=1e-5)


def test_bigram_log_probs_count_with_add_one_smoothing_and_correlation_is_pearsons():
    log_p = bigram_log_probs(torch.tensor([0, 1, 0, 1, 2]), 3)  # pairs 01, 10, 01, 12
    expected = torch.tensor([[1, 3, 1], [2, 1, 2], [1, 1, 1]], dtype=torch.float64)
    assert torch.allclose(log_p, (expected / expected.sum(1, keepdim=True)).log().float())
    a = torch.randn(5, 5)
    assert correlation(a, 3 * a + 1) == pytest.approx(1.0)
    assert correlation(a, -a) == pytest.approx(-1.0)


def test_the_direct_path_of_a_model_fit_to_bigrams_correlates_with_them():
    """A zero-layer-like GPT (one layer, its head's W_O zero) whose E is fit to the text's bigrams by least
    squares through the untied W_U: the direct path then follows the bigrams, correlation near 1."""
    torch.manual_seed(0)
    tokens = torch.randint(0, VOCAB, (2000,))
    tokens[1::2] = (tokens[::2] + 1) % VOCAB  # every even token followed by the next id
    bigrams = bigram_log_probs(tokens, VOCAB)
    model = GPT(
        GPTConfig(
            vocab_size=VOCAB,
            embedding_dim=16,
            num_heads=1,
            num_layers=1,
            mlp_ratio=0,
            tie_weights=False,
            positional="learned",
            norm="rms",
            norm_gain=False,
        )
    )
    with torch.no_grad():
        model.blocks[0].attention.W_O.zero_()
        model.embedding.E.copy_(torch.eye(VOCAB, 16))
        model.W_vocab.zero_()
        model.W_vocab[:VOCAB] = bigrams
    result = circuits(model, bigrams)
    assert result["direct_correlation"] == pytest.approx(1.0, abs=1e-5)
    assert circuits(shaken(tiny_model("gpt")), bigrams)["direct_correlation"] < 0.5


OPTIONS = [
    {"num_kv_heads": 2},
    {"smeared_keys": True},
    {"value_embeddings": True},
    {"qk_norm": True},
    {"positional": "rope"},
    {"tie_weights": False},
    {"mlp_ratio": 0},
    {"norm": "rms", "norm_gain": False},
    {"logit_softcap": 3.0},
    ALL_SWITCHES,
]


@pytest.mark.parametrize("kind", ["gpt", "seed"])
@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: "-".join(o) if len(o) < 3 else "all")
def test_every_option_gives_finite_circuits_of_the_right_shapes(kind, options):
    if kind == "seed":
        options = seed_switches(options)
    model = shaken(tiny_model(kind, **options))
    L, h, T = model.num_layers, model.cfg.num_heads, model.cfg.context_window
    result = circuits(model, bigram_log_probs(torch.randint(0, VOCAB, (100,)), VOCAB))
    assert result["qk"].shape == result["ov"].shape == (L, h, VOCAB, VOCAB)
    assert result["positivity"]["qk"].shape == result["positivity"]["ov"].shape == (L, h)
    assert all(result["composition"][k].shape == (L, h, L, h) for k in "qkv")
    rope = model.cfg.positional == "rope"
    assert (result["positional"] is None) == rope
    assert (result["direct"] is None) == (kind == "seed")
    assert (result["smear"] is None) == (not model.cfg.smeared_keys)
    for value in (result["qk"], result["ov"], result["positivity"]["qk"], *result["composition"].values()):
        assert torch.isfinite(value).all()
    if not rope:
        assert result["positional"].shape == (L, h, T, T) and torch.isfinite(result["positional"]).all()
    if kind == "gpt":
        assert result["direct"].shape == (VOCAB, VOCAB) and -1 <= result["direct_correlation"] <= 1


def test_smeared_keys_mix_the_positional_patterns_key_columns_and_gqa_shares_the_key_head():
    model = shaken(tiny_model("gpt", smeared_keys=True, num_kv_heads=2))
    with torch.no_grad():
        s = torch.sigmoid(model.blocks[0].attention.smear)  # (2,): one per key head
    plain = shaken(tiny_model("gpt", num_kv_heads=2))  # the same weights, no smearing
    P, P0 = positional_qk(model, 0, 1), positional_qk(plain, 0, 1)
    before = torch.cat([P0[:, :1], P0[:, :-1]], dim=1)
    assert torch.allclose(P, s[0] * P0 + (1 - s[0]) * before, atol=1e-6)  # query head 1 reads key head 0
    assert torch.allclose(circuits(model)["smear"][0], s.repeat_interleave(2))
    # Query heads 0 and 1 share a key: their QK circuits differ only through W_Q.
    assert torch.equal(qk_circuit(model, 0, 1), qk_circuit(plain, 0, 1))


def test_value_embeddings_add_their_own_path_to_the_ov_circuit():
    model = shaken(tiny_model("gpt", value_embeddings=True))
    with_table = ov_circuit(model, 1, 2)
    with torch.no_grad():
        model.blocks[1].E_V.zero_()
    assert (with_table - ov_circuit(model, 1, 2)).abs().max() > 0.01
