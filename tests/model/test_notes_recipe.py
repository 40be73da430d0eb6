"""The notes' own recipe: the notes' formulas option by option (their epoch sampling: tests/data/)."""

import math

import pytest
import torch

from src.model import SeedGPT, SeedGPTConfig
from src.model.attention import causal_mask

VOCAB = 11


def notes_model(**options) -> SeedGPT:
    """The notes' model; `options` switches one departure back to model=seed's default."""
    notes = dict(init="notes", ln_affine=False, embedding_scale=False, output_projection=False)
    torch.manual_seed(0)
    sizes = dict(vocab_size=VOCAB, context_window=8, embedding_dim=12, num_heads=3)
    return SeedGPT(SeedGPTConfig(**sizes, **(notes | options)))


def test_the_notes_recipe_model_is_the_notes_formula_line_by_line():
    model = notes_model()
    idx = torch.randint(0, VOCAB, (2, 8), generator=torch.Generator().manual_seed(1))
    X = model.embedding.E[idx] + model.embedding.position.pe[:8]  # X = E[token] + PE, no scale
    X = (X - X.mean(-1, keepdim=True)) / torch.sqrt(X.var(-1, unbiased=False, keepdim=True) + 1e-5)  # no gain/bias
    att = model.attention
    heads = []
    for h in range(3):  # each head on its own 4 columns of W_Q, W_K, W_V
        cols = slice(4 * h, 4 * h + 4)
        Q, K, V = X @ att.W_Q[:, cols], X @ att.W_K[:, cols], X @ att.W_V[:, cols]
        scores = (Q @ K.transpose(-2, -1) / math.sqrt(4)).masked_fill(causal_mask(8)[0], float("-inf"))
        heads.append(torch.softmax(scores, dim=-1) @ V)
    logits = torch.cat(heads, dim=-1) @ model.W_out + model.b_out  # concatenated heads, no W_O
    assert torch.allclose(model(idx)[0], logits, atol=1e-4)
    targets = torch.randint(0, VOCAB, (2, 8))
    every_prefix = torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten())
    assert torch.allclose(model(idx, targets)[1], every_prefix, atol=1e-4)


def test_init_notes_draws_the_matrices_by_torch_randn_and_zeros_the_output_bias():
    notes, small = notes_model(), notes_model(init="small")
    for name in ("embedding.E", "attention.W_Q", "attention.W_K", "attention.W_V", "W_out"):
        assert abs(notes.get_parameter(name).std().item() - 1.0) < 0.25, name  # N(0, 1)
        assert small.get_parameter(name).std().item() < 0.05, name  # N(0, 0.02^2)
    assert torch.equal(notes.b_out, torch.zeros(VOCAB))
    with pytest.raises(ValueError, match="model.init must be one of small, notes"):
        SeedGPTConfig(vocab_size=VOCAB, init="xavier")


def test_ln_affine_adds_a_learned_gain_and_bias():
    assert list(dict(notes_model().ln.named_parameters())) == []
    affine = notes_model(ln_affine=True).ln
    assert affine.gain.shape == affine.bias.shape == (12,)
    x = torch.randn(3, 12)
    with torch.no_grad():
        affine.gain.fill_(2.0), affine.bias.fill_(0.5)
    assert torch.allclose(affine(x), notes_model().ln(x) * 2.0 + 0.5, atol=1e-6)


def test_embedding_scale_multiplies_the_token_rows_by_sqrt_d():
    plain, scaled = notes_model().embedding, notes_model(embedding_scale=True).embedding
    idx = torch.tensor([[1, 2, 3]])
    pe = plain.position.pe[:3]
    assert torch.allclose(plain(idx), plain.E[idx] + pe)
    assert torch.allclose(scaled(idx), scaled.E[idx] * math.sqrt(12) + pe)


def test_output_projection_multiplies_the_concatenated_heads_by_w_o():
    without, with_w_o = notes_model(), notes_model(output_projection=True)
    assert without.attention.W_O is None
    with_w_o.attention.load_state_dict({k: v for k, v in without.attention.state_dict().items()}, strict=False)
    X = torch.randn(2, 8, 12)
    heads, _ = without.attention(X)
    projected, _ = with_w_o.attention(X)
    assert torch.allclose(projected, heads @ with_w_o.attention.W_O, atol=1e-5)
