"""The page's matrix products in WebAssembly SIMD (kernel.js): the same sums as the JavaScript loops and as
PyTorch's float64 product, on every shape the models give (odd rows, odd inner sizes, columns that are
not a multiple of four, one row); the page uses it from file:// (its policy allows compiling
WebAssembly, nothing else) and computes the same views with it as without it."""

from __future__ import annotations

import pytest
import torch

from tests.explorer.browser import chromium, open_page
from tests.explorer.test_explorer import ASCII, page_of, type_text

SHAPES = [(1, 1, 1), (2, 3, 5), (3, 5, 7), (1, 16, 65), (7, 16, 65), (63, 121, 67), (64, 120, 480), (64, 480, 120)]

PRODUCT = """([T, K, N, X, WT, keep]) => {
  const x = Float64Array.from(X), wt = Float64Array.from(WT);
  if (keep) KERNEL.keep(wt, N, K);
  return { kernel: Array.from(KERNEL.matmul(x, wt, T, K, N)), loops: Array.from(matmulScalar(x, wt, T, K, N)) };
}"""


@pytest.fixture(scope="module")
def browser():
    with chromium() as b:
        yield b


@pytest.fixture
def page(tmp_path, browser):
    _, page_file = page_of(tmp_path, "gpt-modern", ASCII)
    opened = open_page(browser, page_file)
    yield opened.page
    assert opened.errors == [] and opened.requests == []
    opened.page.close()


def test_the_page_adds_its_products_in_webassembly(page):
    assert page.evaluate("window.scratchgpt.kernel()") == "WebAssembly SIMD"
    assert "the sums in WebAssembly SIMD" in page.inner_text("#timing")


@pytest.mark.parametrize("keep", [False, True], ids=["operands copied in", "weight kept in memory"])
def test_kernel_sums_equal_the_loops_and_pytorch_on_every_shape(page, keep):
    generator = torch.Generator().manual_seed(0)
    for T, K, N in SHAPES:
        X = torch.randn(T, K, dtype=torch.float64, generator=generator)
        W = torch.randn(K, N, dtype=torch.float64, generator=generator)
        got = page.evaluate(PRODUCT, [T, K, N, X.flatten().tolist(), W.T.flatten().tolist(), keep])
        expected = (X @ W).flatten()
        kernel, loops = (torch.tensor(got[path], dtype=torch.float64) for path in ("kernel", "loops"))
        assert kernel.shape == expected.shape, (T, K, N)
        assert (kernel - expected).abs().max() < 1e-12 * max(1, K), (T, K, N)
        assert (kernel - loops).abs().max() < 1e-12 * max(1, K), (T, K, N)


def test_every_view_is_the_same_with_the_kernel_and_with_the_loops(page):
    """The whole forward pass, through both paths: probabilities, attention, lens and every step of
    every block agree to 1e-12; `useKernel(false)` really switches (the timing line says so)."""
    text = "Before we proceed any further, hear me speak."
    with_kernel = page.evaluate("(t) => [window.scratchgpt.predict(t), window.scratchgpt.internals(t)]", text)
    assert page.evaluate("window.scratchgpt.useKernel(false)") is False
    type_text(page, text)
    assert "the sums in JavaScript" in page.inner_text("#timing")
    with_loops = page.evaluate("(t) => [window.scratchgpt.predict(t), window.scratchgpt.internals(t)]", text)

    def numbers(value):
        if isinstance(value, dict):
            return [n for key in sorted(value) for n in numbers(value[key])]
        if isinstance(value, list):
            return [n for item in value for n in numbers(item)]
        return [value] if isinstance(value, float | int) and not isinstance(value, bool) else []

    a, b = torch.tensor(numbers(with_kernel)), torch.tensor(numbers(with_loops))
    assert a.shape == b.shape and a.numel() > 1000
    assert (a - b).abs().max() < 1e-12


def test_a_hidden_page_still_follows_the_typing(page):
    """Typing asks for the update at the next frame; a hidden page draws no frames, so a timer runs it."""
    page.evaluate("Object.defineProperty(document, 'hidden', { get: () => true })")
    page.evaluate("window.requestAnimationFrame = () => 0")  # as in a hidden tab: no frames
    before = page.evaluate("window.scratchgpt.distribution(document.getElementById('prompt').value)")
    page.focus("#prompt")
    page.keyboard.press("Control+End")
    page.keyboard.type("Fi")
    ran = "Promise.race([window.scratchgpt.settled().then(() => true), new Promise((r) => setTimeout(r, 5000, false))])"
    assert page.evaluate(ran), "the update typing asked for never ran"
    shown = page.evaluate("Array.from(document.querySelectorAll('#window-view .ch.seen'), (e) => e.textContent)")
    assert shown[-2:] == ["F", "i"]
    assert page.evaluate("window.scratchgpt.distribution(document.getElementById('prompt').value)") != before
