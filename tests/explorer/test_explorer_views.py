"""The explorer page as a learner meets it (issue 36), in headless Chromium: each rough edge a
new user found, and the views added since, whose numbers must equal PyTorch's."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from src.explorer.page import write_explorer
from src.training.checkpoint import load_trained
from tests.explorer.browser import chromium, open_page, show, write_checkpoint

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
    show(page, "attention-section", "lens-section")
    assert page.locator("#att-heads canvas").count() == 2 * 4 and page.locator("table.lens").count() == 1
    for text in ["", "€€"]:
        type_text(page, text)
        show(page, "attention-section", "lens-section")
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


# The sections whose views a keystroke draws only when they are in sight.
VIEW_SECTIONS = [
    f"{name}-section" for name in ("embed", "block", "attention", "heads", "qkv", "job", "circuits", "ablate", "lens")
]

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
    page.evaluate("window.scratchgpt.headScores()")
    show(page, *VIEW_SECTIONS)  # every view drawn from this text
    assert page.evaluate("document.documentElement.scrollWidth") <= 420
    too_wide = page.evaluate(
        f"""() => [...document.querySelectorAll('body *')].filter(e => !({WIDE_OK})(e))
              .filter(e => e.getBoundingClientRect().right > 420.5 || e.getBoundingClientRect().width > 420.5)
              .map(e => e.tagName + '#' + e.id + '.' + e.className)"""
    )
    assert too_wide == []
    # Issue 47, item 6: the head grid (4 heads) and "Where it fails" were cut inside their cards
    for box in (".job-box", "#fail-text"):
        assert page.eval_on_selector(box, "b => b.scrollWidth <= b.clientWidth + 1"), box
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
        show(page, "lens-section")
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
    assert "weight × v_j" in header and "the first 3 of its d_k = 4 numbers" in page.inner_text("#att-steps")
    type_text(page, "")
    for button in ["#sample", "#argmax", "#play", "#back"]:
        assert page.locator(button).is_disabled(), button
    type_text(page, "First")
    page.click("#argmax")
    assert page.locator("#back").is_enabled()
    assert page.inner_text("#picked").startswith("argmax wrote ")  # what it wrote, and how
    type_text(page, "")  # issue 47, item 6: the line stayed after the text was cleared
    assert page.inner_text("#picked") == ""


def lens_header(page) -> str:
    return "".join(page.eval_on_selector_all("table.lens tr:first-child th.mono", "hs => hs.map(h => h.textContent)"))


def observed(page) -> None:
    """Wait until the page's IntersectionObserver has had its say on the scroll of now: an observer made
    after it is told in the same task, after it, so the first report of a new one marks that moment."""
    page.evaluate(
        "new Promise((r) => { const o = new IntersectionObserver(() => { o.disconnect(); r(); });"
        " o.observe(document.getElementById('lens-section')); })"
    )


def test_a_view_below_the_fold_is_drawn_when_scrolled_to_and_only_when_its_inputs_changed(gpt_page):
    """Issue 36: a keystroke draws the views in sight; the lens, below the fold, is drawn from the text of
    the moment it comes into sight, and not again while nothing it shows has changed."""
    _, page = gpt_page
    type_text(page, "Before we")
    assert page.locator("#lens-section").get_attribute("data-stale") == ""  # marked, not drawn
    assert lens_header(page) != "Before␣we"  # still the opening text's
    show(page, "lens-section")
    assert lens_header(page) == "Before␣we"
    page.evaluate("document.querySelector('table.lens').kept = true")
    page.evaluate("window.scrollTo(0, 0)")  # away and back: nothing changed, nothing drawn
    observed(page)
    show(page, "lens-section")
    observed(page)  # back in sight before the next keystroke, as a user's eye is
    assert page.evaluate("document.querySelector('table.lens').kept === true")
    # In sight, it follows the keystroke at once (typed as the input event, without scrolling to the box).
    typed = "(t) => { const b = document.getElementById('prompt'); b.value = t; b.dispatchEvent(new Event('input')); }"
    page.evaluate(typed, "Before we p")
    page.evaluate("window.scratchgpt.settled()")
    assert lens_header(page) == "Before␣we␣p" and page.locator("#lens-section").get_attribute("data-stale") is None
    # A character outside the vocabulary leaves the window, the forward pass and every view of it as they were.
    page.evaluate("document.querySelector('table.lens').kept = true")
    page.evaluate(typed, "Before we p€")
    page.evaluate("window.scratchgpt.settled()")
    assert page.evaluate("document.querySelector('table.lens').kept === true")
    assert "not in the vocabulary" in page.inner_text("#window-note")


# ---------------------------------------------------------------- the views inside the model, against PyTorch

SEED_NOTES = {**SEED, "output_projection": False, "ln_affine": False, "embedding_scale": False, "init": "notes"}
MODERN = {**GPT, "norm": "rms", "activation": "swiglu", "mlp_ratio": 3}
ATTENTION_ONLY = {**GPT, "mlp_ratio": 0, "activation": "relu2"}
INSIDE = {
    "gpt": GPT,
    "gpt-untied-learned-bias": UNTIED,
    "gpt-rms-swiglu": MODERN,
    "gpt-attention-only": ATTENTION_ONLY,
    "seed": SEED,
    "seed-notes": SEED_NOTES,
}


def mlp_hidden(mlp, x: torch.Tensor) -> torch.Tensor:
    """The MLP's hidden layer by torch.nn.functional's own activations: GELU, ReLU² or SwiGLU's gate."""
    F = torch.nn.functional
    h = F.linear(x, mlp.W_1.t(), mlp.b_1)
    if mlp.activation == "swiglu":
        return F.silu(h) * F.linear(x, mlp.W_3.t(), mlp.b_3)
    return F.relu(h).square() if mlp.activation == "relu2" else F.gelu(h)


def torch_internals(checkpoint: Path, text: str) -> dict:
    """Every step the page shows, from PyTorch in float64 (the page computes in double from the float32
    weights): module outputs caught by hooks, the MLP's hidden layer by torch's activations, Q/K/V and
    the heads' contexts from the attention module's own weights (no RoPE or QK-norm among these models)."""
    from src.model.attention import causal_mask, scaled_dot_product_attention

    trained = load_trained(checkpoint)
    model = trained.model.double()
    ids = trained.tokenizer.encode(text[-model.context_window :]).unsqueeze(0)
    caught: dict[str, torch.Tensor] = {}

    def catch(name: str):
        def hook(module, inputs, output):
            caught[name] = (output[0] if isinstance(output, tuple) else output)[0]
            caught[name + ".in"] = inputs[0][0]

        return hook

    seed = not hasattr(model, "blocks")
    blocks = [model] if seed else list(model.blocks)
    handles = [model.embedding.register_forward_hook(catch("embedded"))]
    for n, block in enumerate(blocks):
        names = {"ln": "ln_1", "attention": "attention"} if seed else {"ln_1": "ln_1", "attention": "attention"}
        if getattr(block, "mlp", None) is not None:
            names.update({"ln_2": "ln_2", "mlp": "mlp"})
        for attr, name in names.items():
            handles.append(getattr(block, attr).register_forward_hook(catch(f"{n}.{name}")))
        if not seed:
            handles.append(block.register_forward_hook(catch(f"{n}.output")))
    with torch.no_grad():
        model(ids)
        E = model.embedding
        T = ids.shape[1]
        out = {
            "tokens": E.E[ids[0]] * E.scale,
            "positions": E.position(0, T),
            "embedded": caught["embedded"],
            "layers": [],
        }
        for n, block in enumerate(blocks):
            att = block.attention
            X = caught[f"{n}.attention.in"]
            Q, K, V = X @ att.W_Q, X @ att.W_K, X @ att.W_V
            if att.b_QKV is not None:
                Q, K, V = Q + att.b_QKV[0], K + att.b_QKV[1], V + att.b_QKV[2]
            h, d_head = att.num_heads, att.d_head
            Qh, Kh, Vh = (A.reshape(T, h, d_head).transpose(0, 1) for A in (Q, K, V))
            context, _ = scaled_dot_product_attention(Qh, Kh, Vh, causal_mask(T)[0])
            layer = {"q": Q, "k": K, "v": V, "concat": context.transpose(0, 1).reshape(T, -1)}
            layer["ln1"] = caught[f"{n}.ln_1"]
            layer["attention"] = caught[f"{n}.attention"]
            if seed:
                layer["input"] = caught["embedded"]
                layer["output"] = caught[f"{n}.attention"]
                out["layers"].append(layer)
                continue
            layer["input"] = caught[f"{n}.ln_1.in"]
            layer["output"] = caught[f"{n}.output"]
            layer["mid"] = layer["output"]  # attention-only: the residual after attention is the output
            if block.mlp is not None:
                layer["mid"] = caught[f"{n}.ln_2.in"]
                layer["ln2"] = caught[f"{n}.ln_2"]
                layer["hidden"] = mlp_hidden(block.mlp, layer["ln2"])
                layer["mlp"] = caught[f"{n}.mlp"]
            out["layers"].append(layer)
    for h in handles:
        h.remove()
    return out


@pytest.mark.parametrize("name", list(INSIDE))
def test_the_views_inside_the_model_equal_pytorch(tmp_path, browser, name):
    checkpoint, page_file = make_page(tmp_path, INSIDE[name])
    opened = open_page(browser, page_file)
    page = opened.page
    for text in ["Before we proceed any further", "F"]:
        got = page.evaluate("(t) => window.scratchgpt.internals(t)", text)
        expected = torch_internals(checkpoint, text)
        close = lambda a, b: torch.allclose(torch.tensor(a, dtype=torch.float64), b, atol=1e-5, rtol=0)  # noqa: E731
        for key in ["tokens", "positions", "embedded"]:
            assert close(got[key], expected[key]), key
        assert len(got["layers"]) == len(expected["layers"])
        for page_layer, torch_layer in zip(got["layers"], expected["layers"], strict=True):
            assert set(page_layer) == set(torch_layer), set(page_layer) ^ set(torch_layer)
            for key, value in torch_layer.items():
                assert close(page_layer[key], value), key
    # What the views print is those numbers: the block's last row, the Q/K/V view's score.
    type_text(page, "Before we proceed any further")
    show(page, "block-section")
    expected = torch_internals(checkpoint, "Before we proceed any further")
    last = expected["layers"][0]["output"][-1]  # block 0 (the page opens there), the last position
    shown = page.locator("#flow .vec-row").last.locator(".vec-text").inner_text()
    numbers = [float(x) for x in re.findall(r"-?\d+\.\d+", shown.split("|x|")[0])]
    assert numbers == pytest.approx(last[:4].tolist(), abs=6e-4)
    layer = expected["layers"][0]
    d_k = layer["q"].shape[1] // INSIDE[name]["num_heads"]
    T = layer["q"].shape[0]
    show(page, "qkv-section")
    page.select_option("#qkv-key", "3")
    q, k = layer["q"][T - 1, :d_k], layer["k"][3, :d_k]
    score = float(re.search(r"score (-?\d+\.\d+)", page.inner_text("#qkv")).group(1))
    assert score == pytest.approx((q @ k).item() / d_k**0.5, abs=6e-5)
    show(page, "heads-section")
    assert page.locator("#heads-side canvas.side-map").count() == INSIDE[name]["num_heads"]
    assert opened.errors == []


# ---------------------------------------------------------------- what each head does (issue 32, part 5)


def close(page_values: list, scores: torch.Tensor) -> bool:
    return torch.allclose(torch.tensor(page_values, dtype=torch.float64), scores.double(), atol=1e-5, rtol=0)


@pytest.mark.parametrize("config", [GPT, SEED], ids=["gpt", "seed"])
def test_the_pages_head_scores_equal_pythons(tmp_path, browser, config):
    from src.model.head_scores import measure_heads, repeated_probe

    checkpoint, page_file = make_page(tmp_path, config)
    opened = open_page(browser, page_file)
    got = opened.page.evaluate("window.scratchgpt.headScores()")
    trained = load_trained(checkpoint)
    expected = measure_heads(trained.model, repeated_probe(len(VOCAB), config["context_window"]))
    for measure, scores in expected.scores.items():
        assert close(got["scores"][measure], scores), measure
    assert got["inContext"] == pytest.approx(expected.in_context, abs=1e-5)
    assert got["kinds"] == expected.kinds()
    # A bare checkpoint (no head_scores.json beside it) says why there is no time-lapse.
    assert "kept no head scores" in opened.page.inner_text("#timelapse")
    assert opened.page.locator("#step-slider").is_disabled()
    show(opened.page, "job-section")  # drawn with the scores when it comes into sight
    assert opened.page.locator("table.job td").count() == len(expected.kinds()) * config["num_heads"]
    opened.page.click("table.job td >> nth=1")  # layer 0, head 1: its map on the probe beside the one on your text
    assert opened.page.locator("#job-maps canvas").count() == 2
    assert "the same head on your text" in opened.page.inner_text("#job-maps")
    assert opened.errors == []


@pytest.mark.slow
def test_the_time_lapse_replays_what_a_checkpoint_of_that_step_recomputes(trained, tmp_path, browser):
    """Snapshot k of the run's head_scores.json, shown by the page, equals the scores and probe maps
    recomputed from the checkpoint the run saved at step k (best.ckpt and last.ckpt)."""
    from src.model.head_scores import measure_heads, repeated_probe

    run_dir, _ = trained
    page_file = write_explorer(run_dir / "checkpoints" / "last.ckpt", tmp_path / "page.html", tmp_path)
    opened = open_page(browser, page_file)
    page = opened.page
    steps = page.evaluate("() => document.getElementById('step-slider').max")
    assert int(steps) >= 2  # validations at 0, 20 and 40
    for name in ["best.ckpt", "last.ckpt"]:
        model_at_k = load_trained(run_dir / "checkpoints" / name)
        frames = [page.evaluate("(k) => window.scratchgpt.timelapse(k)", k) for k in range(int(steps))]
        k = next(k for k, f in enumerate(frames) if f["step"] == model_at_k.global_step)
        shown = page.evaluate("(k) => window.scratchgpt.timelapse(k)", k)
        assert f"step {model_at_k.global_step}:" in page.inner_text("#step-label")
        probe = repeated_probe(model_at_k.tokenizer.vocab_size, model_at_k.model.context_window)
        again = measure_heads(model_at_k.model, probe)
        for measure, scores in again.scores.items():
            assert close(shown["scores"][measure], scores), measure
        assert shown["in_context"] == pytest.approx(again.in_context, abs=1e-5)
        assert shown["kinds"] == again.kinds()
        for layer, maps in enumerate(again.probe_maps):  # (h, 2n, 2n) per layer, the probe's first string
            for head, weights in enumerate(maps):
                rows = shown["maps"]["probe"][layer][head]
                expected = [[round(1000 * w) for w in r[: i + 1]] for i, r in enumerate(weights.tolist())]
                pairs = [(a, b) for r1, r2 in zip(rows, expected, strict=True) for a, b in zip(r1, r2, strict=True)]
                assert all(abs(a - b) <= 1 for a, b in pairs)  # thousandths: a rounding apart at most
        cells = page.locator("table.job td").all_inner_texts()
        assert f"{again.scores['induction'][0, 0].item():.3f}" in cells[0]
    assert opened.errors == []


# ---------------------------------------------------------------- the words follow the model


SWITCHED = {
    **GPT,
    **{"norm": "rms", "norm_gain": False, "activation": "swiglu", "qk_norm": True, "num_kv_heads": 2},
    **{"positional": "rope", "logit_softcap": 30.0, "value_embeddings": True},
}


@pytest.mark.parametrize(
    ("config", "said", "not_said"),
    [
        (GPT, ["layer norm", "W₁, GELU, W₂", "(x − mean) / √(var + ε) · γ", "GELU(x W₁)"], ["RMSNorm", "SiLU", "RoPE"]),
        (
            SWITCHED,
            [
                *("a SiLU gate W₁ times a value W₃", "SiLU(x W₁) · (x W₃)"),
                "RMSNorm: x / √(mean(x²) + ε), per position",
                *("2 heads of K and V shared by the 4 query heads", "RMS-normalised", "RoPE", "V = X W_V + E_V[c]"),
                "c · tanh(z / c), c = 30",
            ],
            ["layer norm", "GELU", "(x − mean)", "· γ"],
        ),
        (UNTIED, ["GELU(x W₁ + b₁)", "× W₂ + b₂", "· γ + β"], ["RMSNorm"]),
        ({**ATTENTION_ONLY, "norm": "rms"}, ["RMSNorm", "attention only: no MLP"], ["GELU", "ReLU", "layer norm"]),
        (SEED, ["the notes' model", "layer norm", "the output layer"], ["MLP (", "GELU", "RMSNorm"]),
    ],
    ids=["gpt", "switched", "biases", "attention-only-rms", "seed"],
)
def test_the_block_and_lens_texts_say_what_this_model_computes(tmp_path, browser, config, said, not_said):
    """Issue 36: "Inside a block" said LayerNorm and GELU for a model trained with norm=rms and swiglu."""
    _, page_file = make_page(tmp_path, config)
    opened = open_page(browser, page_file)
    text = " ".join(opened.page.inner_text(f"#{box}") for box in ("flow-hint", "flow", "lens-hint", "qkv"))
    assert [s for s in said if s not in text] == []
    assert [s for s in not_said if s in text] == []
    assert opened.errors == []
    opened.page.close()


def test_the_attention_tables_list_the_heaviest_keys_first_and_every_key_on_request(gpt_page):
    """Issue 47, item 5: both tables listed every key in position order, nearly all 0.000, the keys that
    matter out of sight; `× v_j[0]` showed one of d_k numbers."""
    _, page = gpt_page
    type_text(page, LONG[:200])  # a full window: 16 keys seen by the last query
    show(page, "attention-section", "heads-section")

    def weights(selector: str, columns: slice) -> list[list[float]]:
        rows = page.eval_on_selector_all(f"{selector} tr", "rs => rs.map(r => [...r.cells].map(c => c.textContent))")
        return [[float(cell) for cell in row[columns]] for row in rows[1:] if len(row) > 2 and row[0].isdigit()]

    steps = [row[0] for row in weights("table.steps", slice(4, 5))]  # the softmax column
    assert len(steps) == 8 and steps == sorted(steps, reverse=True)  # the heaviest 8 of 16, heaviest first
    rest = page.inner_text("table.steps tr.rest-row")
    assert rest.startswith("8 other keys, each weighing at most ") and float(rest.split()[-1]) < 1 - sum(steps) + 2e-3
    assert re.search(r"\[-?\d\.\d{3}, -?\d\.\d{3}, -?\d\.\d{3}, …\]\s+\|x\| = \d\.\d\d", page.inner_text("table.steps"))
    side = weights("table.side-table", slice(2, None))
    assert len(side) == 8 and [max(r) for r in side] == sorted((max(r) for r in side), reverse=True)
    page.click("#att-steps .keys-toggle")  # every key, in position order
    page.evaluate("window.scratchgpt.settled()")
    show(page, "attention-section", "heads-section")  # the click scrolled the side table out of sight
    keys = page.eval_on_selector_all("table.steps tr", "rs => rs.slice(1).map(r => r.cells[0].textContent)")
    assert keys == [str(j) for j in range(16)]
    assert page.locator("table.side-table tr").count() == 1 + 16


@pytest.mark.slow
def test_the_time_lapse_opens_on_the_strongest_induction_head_plays_and_labels_its_steps(trained, tmp_path, browser):
    """Issue 47, item 4: the page opened on layer 0's head 0 ("no kind") while head 2 was the induction head;
    no play button, no step labels."""
    import json
    import shutil

    run_dir = tmp_path / "run"
    shutil.copytree(trained[0], run_dir)
    stored = json.loads((run_dir / "head_scores.json").read_text())
    last = stored["snapshots"][-1]  # make layer 1's head 1 the strongest induction head, layer 0's head 0 another
    for layer, head, score in ((1, 1, 0.9), (0, 0, 0.6)):
        last["scores"]["induction"][layer][head] = score
        last["kinds"][layer][head] = "induction"
    (run_dir / "head_scores.json").write_text(json.dumps(stored))
    opened = open_page(browser, write_explorer(run_dir / "checkpoints" / "last.ckpt", tmp_path / "page.html", tmp_path))
    page = opened.page
    show(page, "job-section")
    cells = page.locator("table.job td")
    selected = [k for k in range(cells.count()) if "selected" in (cells.nth(k).get_attribute("class") or "")]
    heads = len(last["kinds"][0])
    assert selected == [1 * heads + 1]  # layer 1, head 1
    ticks = page.locator(".lapse-ticks span").all_inner_texts()
    assert ticks[0] == "0" and ticks[-1] == "now"
    last_frame = page.evaluate("() => document.getElementById('step-slider').max")
    page.click("#lapse-play")
    assert page.evaluate("() => document.getElementById('step-slider').value") == "0"  # from the first validation
    assert page.inner_text("#lapse-play") == "❚❚ pause" and page.inner_text("#step-label").startswith("step 0:")
    page.wait_for_function(f"() => document.getElementById('step-slider').value === '{last_frame}'", timeout=20_000)
    page.wait_for_function("() => document.getElementById('lapse-play').textContent === '▶ play'")
    assert page.inner_text("#step-label").startswith("this checkpoint")
    assert opened.errors == []
