"""The explorer page as a learner meets it (issue 36), in headless Chromium: each rough edge a
new user found, and the views added since, whose numbers must equal PyTorch's."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from benchmarks.browser import chromium, open_page
from benchmarks.explorer_page import write_checkpoint
from src.explorer.page import write_explorer

VOCAB = sorted(set("First Citizen:\nBefore we proceed any further, hear me speak.\n"))
GPT = {"kind": "gpt", "context_window": 16, "embedding_dim": 16, "num_heads": 4, "num_layers": 2}
UNTIED = {**GPT, "tie_weights": False, "positional": "learned", "bias": True, "mlp_ratio": 2}
SEED = {"kind": "seed", "context_window": 12, "embedding_dim": 12, "num_heads": 3}
LONG = "Before we proceed any further, hear me speak. " * 70  # 3,220 characters


@pytest.fixture(scope="module")
def browser():
    with chromium() as b:
        yield b


def make_page(folder: Path, config: dict, run: str = "2026-11-24/23-28-30") -> tuple[Path, Path]:
    """A page of a seeded model, from a checkpoint where a run keeps it (<date>/<time>/checkpoints)."""
    checkpoint = folder / run / "checkpoints" / "best.ckpt"
    checkpoint.parent.mkdir(parents=True)
    write_checkpoint(checkpoint, config, VOCAB, spread=0.3)
    text = folder / "text.txt"
    text.write_text("".join(VOCAB) * 3, encoding="utf-8")
    return checkpoint, write_explorer(checkpoint, folder / "page.html", folder, text=str(text))


@pytest.fixture
def gpt_page(tmp_path, browser):
    checkpoint, page_file = make_page(tmp_path, GPT)
    opened = open_page(browser, page_file)
    yield checkpoint, opened.page
    assert opened.errors == [] and opened.requests == []
    opened.page.close()


def type_text(page, text: str) -> None:
    page.fill("#prompt", text)
    page.evaluate("window.scratchgpt.settled()")


# ---------------------------------------------------------------- items 1-7 of issue 36


def test_an_empty_or_unknown_text_clears_the_attention_and_the_lens(gpt_page):
    _, page = gpt_page
    type_text(page, "First")
    assert page.locator("#att-heads canvas").count() == 2 * 4 and page.locator("table.lens").count() == 1
    for text in ["", "€€"]:
        type_text(page, text)
        assert page.locator("#att-heads canvas").count() == 0  # not the previous text's thumbnails
        assert page.locator("#att-text .ch").count() == 0 and page.locator("table.steps").count() == 0
        assert page.locator("table.lens").count() == 0
        assert page.locator("#att-map").is_hidden()
        assert "no character of the vocabulary" in page.inner_text("#att-caption")


def bar_rows(page) -> list[tuple[str, str, float, str]]:
    """Each bar: its label, its classes, its grey (before filtering) width in px, its value."""
    return page.eval_on_selector_all(
        "#bars .bar-row:not(.rest)",
        """rows => rows.map(r => [r.querySelector('.bar-label').textContent, r.className,
             r.querySelector('.bar-raw').getBoundingClientRect().width, r.querySelector('.bar-value').textContent])""",
    )


def test_top_k_and_top_p_keep_the_cut_characters_in_order_with_their_grey_bars(gpt_page):
    _, page = gpt_page
    text = "First Citizen:"
    type_text(page, text)
    raw = page.evaluate("(t) => window.scratchgpt.distribution(t)", text)
    by_likelihood = sorted(range(len(raw)), key=lambda i: -raw[i])
    glyphs = [{" ": "␣", "\n": "⏎"}.get(VOCAB[i], VOCAB[i]) for i in by_likelihood]
    page.fill("#top-k", "3")
    rows = bar_rows(page)
    assert [label for label, *_ in rows] == glyphs[: len(rows)]  # the likely ones first, cut or not
    assert all("cut" not in cls for _, cls, _, _ in rows[:3]) and all("cut" in cls for _, cls, _, _ in rows[3:])
    assert all(width > 1 for _, _, width, _ in rows[3:6])  # the grey "before filtering" bars stay
    assert "bar-row rest" not in page.inner_html("#bars") or page.locator(".bar-row.rest .bar").evaluate(
        "b => b.getBoundingClientRect().right <= b.parentElement.getBoundingClientRect().right + 0.5"
    )
    # An impossible top-p says so, and the bars show what is applied: no top-p at all.
    page.fill("#top-k", "")
    page.fill("#top-p", "0.5")
    page.fill("#top-p", "7")
    assert "top-p" in page.inner_text("#filter-note") and "ignored" in page.inner_text("#filter-note")
    shown = [float(value.rstrip("%")) for *_, value in bar_rows(page)]
    assert shown == pytest.approx([round(100 * raw[i], 1) for i in by_likelihood[: len(shown)]], abs=0.051)
    page.fill("#top-p", "0.5")
    assert page.inner_text("#filter-note") == ""


def test_writing_shows_the_picked_character_and_its_probability(gpt_page):
    _, page = gpt_page
    text = "First Citizen:"
    type_text(page, text)
    page.fill("#top-k", "5")
    before = page.evaluate("(t) => window.scratchgpt.distribution(t, {topK: 5})", text)
    page.evaluate("Math.random = () => 0.5")
    page.click("#sample")
    page.evaluate("window.scratchgpt.settled()")
    written = page.input_value("#prompt")
    assert written[:-1] == text
    picked = VOCAB.index(written[-1])
    note = page.inner_text("#picked")
    assert "sampled" in note and f"{100 * before[picked]:.1f}%" in note and repr(written[-1])[1:-1] in note
    page.click("#argmax")
    page.evaluate("window.scratchgpt.settled()")
    assert "argmax" in page.inner_text("#picked")
    classes = page.eval_on_selector_all("#window-view .ch", "s => s.map(e => e.className)")
    assert all("written" in c for c in classes[-2:]) and all("written" not in c for c in classes[:-2])


def test_play_keeps_its_button_in_place_and_the_strip_to_the_window(gpt_page):
    _, page = gpt_page
    type_text(page, LONG)
    assert page.locator("#window-view .ch").count() <= GPT["context_window"] + 1  # the window and a "…" marker
    assert f"{len(LONG) - GPT['context_window']:,} earlier" in page.inner_text("#window-view")
    page.click("#play")
    y = page.locator("#play").bounding_box()["y"]
    page.wait_for_function("(n) => document.getElementById('prompt').value.length >= n", arg=len(LONG) + 12)
    assert page.locator("#play").bounding_box()["y"] == y
    page.click("#play")
    box = page.eval_on_selector("#prompt", "b => [b.scrollTop, b.clientHeight, b.scrollHeight]")
    assert box[0] + box[1] >= box[2] - 1  # the text box follows the new text


# Inside a box that scrolls sideways (the lens, the steps table), a wide table is read by scrolling it.
WIDE_OK = """e => { for (let p = e.parentElement; p; p = p.parentElement) {
  const o = getComputedStyle(p).overflowX; if (o === 'auto' || o === 'scroll') return true; } return false; }"""


@pytest.mark.parametrize("config", [GPT, SEED], ids=["gpt", "seed"])
def test_a_420_px_screen_has_nothing_wider_than_itself(tmp_path, browser, config):
    _, page_file = make_page(tmp_path, config)
    opened = open_page(browser, page_file, width=420, height=900)
    page = opened.page
    type_text(page, LONG[:200])
    page.evaluate("window.scratchgpt.excerpt()")
    assert page.evaluate("document.documentElement.scrollWidth") <= 420
    too_wide = page.evaluate(
        f"""() => [...document.querySelectorAll('body *')].filter(e => !({WIDE_OK})(e))
              .filter(e => e.getBoundingClientRect().right > 420.5 || e.getBoundingClientRect().width > 420.5)
              .map(e => e.tagName + '#' + e.id + '.' + e.className)"""
    )
    assert too_wide == []
    # The bars come before the buttons that sample from them; the lens opens at the prediction.
    assert page.locator("#next-section").bounding_box()["y"] < page.locator("#write-section").bounding_box()["y"]
    lens = page.eval_on_selector("#lens-grid", "b => [b.scrollLeft, b.clientWidth, b.scrollWidth]")
    assert lens[0] + lens[1] >= lens[2] - 1
    assert opened.errors == []


def luminance(rgb: str) -> float:
    def channel(c: float) -> float:
        c /= 255
        return c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = (float(x) for x in re.findall(r"[\d.]+", rgb)[:3])
    return 0.2126 * channel(r) + 0.7152 * channel(g) + 0.0722 * channel(b)


def contrast(a: str, b: str) -> float:
    hi, lo = sorted([luminance(a), luminance(b)], reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def test_the_lens_is_readable_and_says_why_the_tied_embedding_row_predicts_its_input(tmp_path, browser):
    _, tied = make_page(tmp_path / "tied", GPT)
    _, untied = make_page(tmp_path / "untied", UNTIED)
    for page_file, is_tied in [(tied, True), (untied, False)]:
        page = open_page(browser, page_file).page
        type_text(page, "Before we proceed")
        cells = page.eval_on_selector_all(
            ".lens-cell",
            """cs => cs.map(c => { const s = getComputedStyle(c), n = getComputedStyle(c.querySelector('small'));
                 return [s.color, s.backgroundColor, n.color, c.classList.contains('hit'), s.outlineColor]; })""",
        )
        assert cells
        for color, background, small, hit, outline in cells:
            assert contrast(color, background) >= 4.5 and contrast(small, background) >= 4.5
            if hit:
                assert contrast(outline, background) >= 3
        text = page.inner_text("#lens-section")
        assert ("tied" in text and "own embedding" in text) == is_tied
        page.close()


def test_legends_disabled_buttons_the_value_component_and_the_dated_title(gpt_page):
    _, page = gpt_page
    assert page.title() == "scratchgpt explorer: 2026-11-24 23-28-30"
    assert page.locator("#back").is_disabled()  # nothing written yet
    for legend in ["#att-legend", "#lens-legend", "#fail-legend"]:
        assert page.locator(legend).is_visible(), legend
    header = page.inner_text("table.steps tr >> nth=0")
    assert "v_j[0]" in header and "the first of v_j's d_k = 4 numbers" in page.inner_text("#att-steps")
    type_text(page, "")
    for button in ["#sample", "#argmax", "#play", "#back"]:
        assert page.locator(button).is_disabled(), button
    type_text(page, "First")
    page.click("#argmax")
    assert page.locator("#back").is_enabled()
