"""Issue 45 in the page: the circuits it computes from its weights equal PyTorch's, and a head switched
off changes the loss exactly as a PyTorch forward pass without that head does."""

from __future__ import annotations

import contextlib
import json

import pytest
import torch

from src.explorer.page import write_explorer
from src.model.ablation import ablate, window_loss
from src.model.circuits import circuits
from src.model.head_scores import measure_heads, repeated_probe
from src.training.checkpoint import load_trained
from src.training.heads import circuits_snapshot
from tests.explorer.browser import chromium, open_page, show
from tests.explorer.test_explorer_views import GPT, SEED, SWITCHED, VOCAB, make_page

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


def close(page_values, expected, atol: float = 1e-5) -> bool:
    got = torch.tensor(page_values, dtype=torch.float64)
    return torch.allclose(got, torch.as_tensor(expected, dtype=torch.float64), atol=atol, rtol=0)


def assert_equal_circuits(got: dict, model) -> None:
    """The page's circuits against src/model/circuits.py's, entry by entry, to 1e-5."""
    expected = circuits(model)
    for kind in ["qk", "ov"]:
        assert close(got[kind], expected[kind]), kind
        assert close(got["positivity"][kind], expected["positivity"][kind]), kind
    assert (got["direct"] is None) == (expected["direct"] is None)
    if expected["direct"] is not None:
        assert close(got["direct"], expected["direct"])
    for kind in "qkv":
        assert close(got["composition"][kind], expected["composition"][kind]), kind


def test_the_pages_circuits_and_composition_equal_pythons(gpt):
    model, page = gpt
    assert_equal_circuits(page.evaluate("window.scratchgpt.circuits()"), model)
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


SEED_BARE = {**SEED, "output_projection": False, "ln_affine": False}
OPTIONS = {
    **SWITCHED,
    "smeared_keys": True,
    "logit_softcap": None,
    "norm_gain": True,
}  # qk_norm, GQA, E_V, RoPE, RMSNorm


@pytest.mark.parametrize(
    "config", [SEED_BARE, OPTIONS, {**OPTIONS, "logit_softcap": 30.0}], ids=["seed", "options", "softcap"]
)
def test_the_pages_circuits_equal_pythons_for_every_kind_and_option(tmp_path, browser, config):
    checkpoint, page_file = make_page(tmp_path, config)
    opened = open_page(browser, page_file)
    assert_equal_circuits(opened.page.evaluate("window.scratchgpt.circuits()"), load_trained(checkpoint).model)
    assert opened.errors == []
    opened.page.close()


def loss_without(model, text: str, heads: list[tuple[int, int, str]]) -> float:
    """The mean loss of `text`'s predictions by PyTorch with these heads taken out (src/model/ablation.py):
    mean-ablated heads get their mean over the window's positions in the whole model, as the page takes it
    (so their `ablate` is entered first), then the zero-ablated ones are zeroed."""
    ids = torch.tensor([[VOCAB.index(ch) for ch in text]])
    by_mode = {mode: [(layer, head) for layer, head, m in heads if m == mode] for mode in ("mean", "zero")}
    with contextlib.ExitStack() as taken:
        if by_mode["mean"]:
            taken.enter_context(ablate(model, by_mode["mean"], "mean", mean_over=ids))
        if by_mode["zero"]:
            taken.enter_context(ablate(model, by_mode["zero"]))
        return window_loss(model, ids)


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
    # The in-context score on the probe, scored in the background, is PyTorch's without the head.
    in_context = "#ablate .ablate-summary tr:nth-child(3) td.after"
    show(page, "ablate-section")  # in sight again (the views above it may have grown as they were drawn)
    page.wait_for_function("(cell) => !document.querySelector(cell).textContent.includes('scoring')", arg=in_context)
    with ablate(model, [(1, 2)]):
        without = measure_heads(model, repeated_probe(len(VOCAB), GPT["context_window"])).in_context
    assert f"{without:.3f}" in page.inner_text(in_context)


def test_the_slider_shows_a_snapshots_circuits(tmp_path, browser):
    """A snapshot's circuits in head_scores.json (here of another model's weights) are what the view draws
    at its step; the last position is this checkpoint's, computed in the page."""
    checkpoint, _ = make_page(tmp_path / "then", GPT)
    earlier = circuits(load_trained(checkpoint).model)
    checkpoint, _ = make_page(tmp_path / "now", {**GPT, "tie_weights": False})
    L, H = GPT["num_layers"], GPT["num_heads"]
    zeros = [[0.0] * H for _ in range(L)]
    snapshot = {
        "step": 5,
        "val_loss": 3.0,
        "in_context": 0.0,
        "in_context_text": None,
        "maps": None,
        "scores": {
            m: zeros for m in ["previous_token", "duplicate_token", "induction", "first_token", "attention_distance"]
        },
        "kinds": [[None] * H for _ in range(L)],
        "circuits": circuits_snapshot({**earlier, "direct_correlation": 0.5}),
    }
    run = checkpoint.parent.parent
    (run / "head_scores.json").write_text(json.dumps({"format": "scratchgpt head scores 1", "snapshots": [snapshot]}))
    page_file = write_explorer(checkpoint, tmp_path / "page.html", tmp_path, text=str(tmp_path / "now" / "text.txt"))
    opened = open_page(browser, page_file)
    page = opened.page
    show(page, "circuits-section")
    page.select_option("#circuit-head", "1.3")
    now = page.evaluate("window.scratchgpt.shownCircuits()")
    page.evaluate("window.scratchgpt.timelapse(0)")
    show(page, "circuits-section")
    then = page.evaluate("window.scratchgpt.shownCircuits()")
    assert then["step"] == 5 and now["step"] == 7 and then["head"] == [1, 3]
    for kind in ["qk", "ov"]:
        expected = earlier[kind][1, 3].flatten().double()
        assert close(then[kind], expected, atol=float(expected.abs().max()) / 1000)  # to a thousandth of its largest
        assert not close(now[kind], expected, atol=float(expected.abs().max()) / 10)
    assert "the run's own, against its training text: 0.500" in page.inner_text("#direct-correlation")
    assert "step 5" in page.inner_text("#circuit-step")
    assert opened.errors == []
