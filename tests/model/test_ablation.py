"""Taking heads out: the loss with a head ablated equals a forward written by hand without that head's output."""

import pytest
import torch
import torch.nn.functional as F

from src.model.ablation import ablate, ablation_table, parse_heads, window_loss
from src.model.checks import InvalidModelConfig
from tests.model.test_circuits import shaken
from tests.model.tiny_models import VOCAB, tiny_model


def heads_by_hand(attention, X: torch.Tensor, replace: dict[int, torch.Tensor | None], seen: dict) -> torch.Tensor:
    """One attention layer (no bias, no options) from its matrices and PyTorch's own attention: head i's context
    replaced by replace[i] (None: zero) before W_O. Each head's context is kept in `seen`."""
    B, T, d = X.shape
    h, d_head = attention.num_heads, attention.d_head

    def split(M: torch.Tensor) -> torch.Tensor:
        return (X @ M).view(B, T, h, d_head).transpose(1, 2)  # (B, h, T, d_head)

    context = F.scaled_dot_product_attention(
        split(attention.W_Q), split(attention.W_K), split(attention.W_V), is_causal=True
    )
    for head in range(h):
        seen[head] = context[:, head]
        if head in replace:
            context[:, head] = 0.0 if replace[head] is None else replace[head]
    return context.transpose(1, 2).reshape(B, T, d) @ attention.W_O


def loss_by_hand(model, idx: torch.Tensor, removed: dict[tuple[int, int], torch.Tensor | None], seen=None) -> float:
    x, y = idx[:, :-1], idx[:, 1:]
    seen = {} if seen is None else seen
    with torch.no_grad():
        if hasattr(model, "blocks"):  # the GPT: pre-LN blocks, attention + MLP, tied head
            X = model.embedding(x)
            for layer, block in enumerate(model.blocks):
                replace = {h: v for (at, h), v in removed.items() if at == layer}
                X = X + heads_by_hand(block.attention, block.ln_1(X), replace, seen.setdefault(layer, {}))
                X = X + block.mlp(block.ln_2(X))
            logits = model.ln_f(X) @ model.embedding.E.t()
        else:  # the seed model: LN, one attention layer, W_out
            replace = {h: v for (_, h), v in removed.items()}
            out = heads_by_hand(model.attention, model.ln(model.embedding(x)), replace, seen.setdefault(0, {}))
            logits = out @ model.W_out + model.b_out
    return float(F.cross_entropy(logits.flatten(0, 1), y.flatten()))


def windows(batch: int = 4, T: int = 8, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, VOCAB, (batch, T), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("fused", [False, True])
def test_a_zero_ablated_heads_loss_equals_a_forward_without_its_output(kind, fused):
    model = shaken(tiny_model(kind, fused=fused))
    idx = windows()
    base = window_loss(model, idx)
    assert base == pytest.approx(loss_by_hand(model, idx, {}), abs=1e-5)
    last = model.num_layers - 1
    for heads in ([(0, 1)], [(0, 0), (last, 2)]):
        with ablate(model, heads):
            ablated = window_loss(model, idx)
        assert ablated == pytest.approx(loss_by_hand(model, idx, dict.fromkeys(heads)), abs=1e-5)
        assert abs(ablated - base) > 1e-3  # the heads mattered
    assert window_loss(model, idx) == base  # and leaving the block gives them back


def test_a_mean_ablated_head_gives_its_mean_output_over_the_reference_windows(kind):
    model = shaken(tiny_model(kind))
    idx, reference = windows(), windows(batch=6, seed=2)
    layer = model.num_layers - 1
    seen: dict = {}
    loss_by_hand(model, reference, {}, seen)  # every head's context on the reference windows
    mean = seen[layer][1].mean(dim=(0, 1))  # (d_head,)
    with ablate(model, [(layer, 1)], mode="mean", mean_over=reference[:, :-1]):
        ablated = window_loss(model, idx)
    assert ablated == pytest.approx(loss_by_hand(model, idx, {(layer, 1): mean}), abs=1e-5)


def test_the_ablation_table_is_each_heads_rise_alone():
    model = shaken(tiny_model("gpt"))
    idx = windows()
    table = ablation_table(model, idx)
    assert table["loss"] == pytest.approx(window_loss(model, idx)) and table["windows"] == 4
    assert len(table["rise"]) == 2 and len(table["rise"][0]) == 4
    with ablate(model, [(1, 3)]):
        assert table["rise"][1][3] == pytest.approx(window_loss(model, idx) - table["loss"])


@pytest.mark.parametrize(
    ("names", "message"),
    [
        ("L9H9", r"^ablate=L9H9 is not a head of this model, which has layers L0-L1 and heads H0-H3: e\.g\."),
        ("L0H4", r"^ablate=L0H4 is not a head of this model"),
        ("L0X", r"^ablate=L0X is not a head: write L<layer>H<head>, e\.g\. ablate=L0H2 or ablate=\[L0H2,L1H0\]$"),
        ([], r"^ablate names no head"),
    ],
)
def test_a_head_that_is_not_there_is_refused_naming_it(names, message):
    with pytest.raises(InvalidModelConfig, match=message):
        parse_heads(names, num_layers=2, num_heads=4)
    assert parse_heads(["L1H3", "L0H0"], 2, 4) == [(1, 3), (0, 0)] and parse_heads("L0H2", 2, 4) == [(0, 2)]
