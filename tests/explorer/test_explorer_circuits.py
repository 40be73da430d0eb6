"""Issue 45 in the page: the circuits it computes from its weights equal PyTorch's, and a head switched
off changes the loss exactly as a PyTorch forward pass without that head does."""

from __future__ import annotations

import math

import pytest
import torch

from src.training.checkpoint import load_trained
from tests.explorer.browser import chromium, open_page, show
from tests.explorer.test_explorer_views import GPT, VOCAB, make_page

TEXT = "Before we proceed any further, hear me speak."


@pytest.fixture(scope="module")
def browser():
    with chromium() as b:
        yield b


@pytest.fixture(scope="module")
def gpt(tmp_path_factory, browser):
    checkpoint, page_file = make_page(tmp_path_factory.mktemp("circuits"), GPT)
    opened = open_page(browser, page_file)
    yield load_trained(checkpoint).model.double(), opened.page
    assert opened.errors == [] and opened.requests == []
    opened.page.close()


def reference_circuits(model) -> dict:
    """The circuits by hand in float64: LayerNorm's gains folded in, W_E, W_O, W_Q/K/V centred over d_model
    and W_U over the vocabulary (TransformerLens's fold); eigenvalues by torch.linalg.eigvals."""
    d, H = model.cfg.embedding_dim, model.cfg.num_heads
    dk = d // H
    WE = model.embedding.E * model.embedding.scale
    WE = WE - WE.mean(-1, keepdim=True)
    WU = model.embedding.E.t() * model.ln_f.gain[:, None]
    WU = WU - WU.mean(-1, keepdim=True)

    def positivity(M: torch.Tensor) -> float:
        values = torch.linalg.eigvals(M)
        return (values.sum() / values.abs().sum()).real.item()

    out = {"qk": [], "ov": [], "positivity": {"qk": [], "ov": []}, "direct": WE @ WU}
    heads = []
    for block in model.blocks:
        att, gain = block.attention, block.ln_1.gain[:, None]
        layer = []
        for h in range(H):
            cols = slice(h * dk, (h + 1) * dk)
            folded = [gain * W[:, cols] - (gain * W[:, cols]).mean(0) for W in (att.W_Q, att.W_K, att.W_V)]
            WO = att.W_O[cols] - att.W_O[cols].mean(-1, keepdim=True)
            layer.append((*folded, WO))
        heads.append(layer)
        qk = [(WE @ WQ) @ (WE @ WK).t() / math.sqrt(dk) for WQ, WK, _, _ in layer]
        ov = [WE @ WV @ WO @ WU for _, _, WV, WO in layer]
        out["qk"].append(qk)
        out["ov"].append(ov)
        out["positivity"]["qk"].append([positivity(M) for M in qk])
        out["positivity"]["ov"].append([positivity(M) for M in ov])
    L = len(heads)
    out["composition"] = {kind: torch.zeros(L, H, L, H, dtype=torch.float64) for kind in "qkv"}
    for l1 in range(L):
        for h1, (_, _, WV1, WO1) in enumerate(heads[l1]):
            A = WV1 @ WO1
            for l2 in range(l1 + 1, L):
                for h2, (WQ, WK, WV, WO) in enumerate(heads[l2]):
                    for kind, B in {"q": WQ @ WK.t(), "k": WK @ WQ.t(), "v": WV @ WO}.items():
                        out["composition"][kind][l1, h1, l2, h2] = (A @ B).norm() / (A.norm() * B.norm())
    return out


def close(page_values, expected, atol: float = 1e-5) -> bool:
    got = torch.tensor(page_values, dtype=torch.float64)
    return torch.allclose(got, torch.as_tensor(expected, dtype=torch.float64), atol=atol, rtol=0)


def test_the_pages_circuits_and_composition_equal_pytorchs(gpt):
    model, page = gpt
    got = page.evaluate("window.scratchgpt.circuits()")
    expected = reference_circuits(model)
    for kind in ["qk", "ov"]:
        for layer_got, layer_expected in zip(got[kind], expected[kind], strict=True):
            assert all(close(a, b) for a, b in zip(layer_got, layer_expected, strict=True)), kind
        assert close(got["positivity"][kind], expected["positivity"][kind]), kind
    assert close(got["direct"], expected["direct"])
    for kind in "qkv":
        assert close(got["composition"][kind], expected["composition"][kind]), kind
    # The view draws them with the characters on both axes; hovering a cell says what it means.
    show(page, "circuits-section")
    page.select_option("#circuit-head", "1.2")
    show(page, "circuits-section")
    maps = page.locator("#circuits canvas.circuit-map")
    assert maps.count() == 4  # QK, OV, the direct path, the bigrams
    box = maps.first.bounding_box()
    page.mouse.move(box["x"] + box["width"] - 3, box["y"] + box["height"] - 3)  # the last row and column
    assert f'when the query is "{VOCAB[-1]}" this head' in page.inner_text("#tooltip")
    assert page.locator("#tooltip").is_visible()


def loss_without(model, text: str, heads: list[tuple[int, int, str]]) -> float:
    """The mean loss of `text`'s predictions by PyTorch with these heads taken out by hand: each head's
    columns of the concatenated context, before W_O, set to zero or to their mean over the positions
    of the whole model's forward pass (the mean the page keeps when a head is switched to it)."""
    ids = torch.tensor([[VOCAB.index(ch) for ch in text]])
    dk = model.cfg.embedding_dim // model.cfg.num_heads
    clean = {}  # layer -> the concatenated context (1, T, d) of the whole model
    kept = {block.attention: block.attention.project_out for block in model.blocks}

    def catch(layer):
        def project_out(context):
            clean[layer] = context
            return kept[model.blocks[layer].attention](context)

        return project_out

    def replace(layer):
        def project_out(context):
            context = context.clone()
            for at, h, mode in heads:
                cols = slice(h * dk, (h + 1) * dk)
                if at == layer:
                    context[..., cols] = 0 if mode == "zero" else clean[at][..., cols].mean(dim=-2, keepdim=True)
            return kept[model.blocks[layer].attention](context)

        return project_out

    try:
        with torch.no_grad():
            for n, block in enumerate(model.blocks):
                block.attention.project_out = catch(n)
            model(ids)
            for n, block in enumerate(model.blocks):
                block.attention.project_out = replace(n)
            logits, _ = model(ids)
    finally:
        for att, original in kept.items():
            att.project_out = original
    return torch.nn.functional.cross_entropy(logits[0, :-1], ids[0, 1:]).item()


def test_a_head_switched_off_in_the_page_loses_what_pytorch_loses_without_it(gpt):
    model, page = gpt
    window = TEXT[-GPT["context_window"] :]  # a full window: T - 1 predictions scored
    for heads in [[(1, 2, "zero")], [(0, 1, "zero"), (1, 3, "mean")]]:
        got = page.evaluate("([t, h]) => window.scratchgpt.ablate(t, h)", [window, heads])
        assert got["loss"] == pytest.approx(loss_without(model, window, heads), abs=1e-6)
        assert got["lossBefore"] == pytest.approx(loss_without(model, window, []), abs=1e-6)
        assert abs(got["loss"] - got["lossBefore"]) > 1e-3  # the heads mattered: the test can tell
    # The switch in the view: the loss on the shown text, before and after.
    page.fill("#prompt", window)
    page.evaluate("window.scratchgpt.settled()")
    show(page, "ablate-section")
    page.select_option("#ablate select[data-head='1.2']", "zero")
    expected = loss_without(model, window, [(1, 2, "zero")])
    assert f"{expected:.3f}" in page.inner_text("#ablate .ablate-summary tr:nth-child(2) td.after")
