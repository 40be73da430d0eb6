"""The explorer page in a real browser: its forward pass equals PyTorch's, its views equal the CLIs'."""

from __future__ import annotations

import math
import re

import pytest
import torch

from src.explorer.page import write_explorer
from src.model.generation import next_token_distribution
from src.training.checkpoint import load_trained
from tests.explorer.browser import chromium, open_page, show, write_checkpoint
from tests.helpers import run_cli, run_main
from tests.model.tiny_models import ALL_SWITCHES, seed_switches

ASCII = sorted(set("First Citizen:\nBefore we proceed any further, hear me speak.\n"))
CJK_EMOJI = list("ab \n春夏秋冬山水😀🎉")

# Every model option the page must follow, on both kinds.
MODELS = {
    "gpt": {"kind": "gpt", "context_window": 12, "embedding_dim": 16, "num_heads": 4, "num_layers": 2},
    "gpt-learned-bias-untied": {
        "kind": "gpt",
        "context_window": 10,
        "embedding_dim": 12,
        "num_heads": 2,
        "num_layers": 3,
        "mlp_ratio": 2,
        "positional": "learned",
        "bias": True,
        "tie_weights": False,
    },
    "gpt-attention-only": {"kind": "gpt", "context_window": 8, "embedding_dim": 12, "num_heads": 3, "mlp_ratio": 0},
    "seed": {"kind": "seed", "context_window": 8, "embedding_dim": 12, "num_heads": 3},
    "seed-notes": {
        "kind": "seed",
        "context_window": 9,
        "embedding_dim": 10,
        "num_heads": 5,
        "output_projection": False,
        "ln_affine": False,
        "embedding_scale": False,
        "init": "notes",
    },
    "seed-learned": {"kind": "seed", "context_window": 8, "embedding_dim": 12, "num_heads": 2, "positional": "learned"},
    # Today's switches (issue 33), all at once, then the other choices of each.
    "gpt-modern": {
        "kind": "gpt",
        "context_window": 12,
        "embedding_dim": 16,
        "num_heads": 4,
        "num_layers": 2,
        **ALL_SWITCHES,
    },
    "gpt-relu2-mqa-rms-without-gain": {
        "kind": "gpt",
        "context_window": 10,
        "embedding_dim": 12,
        "num_heads": 3,
        "num_layers": 2,
        "activation": "relu2",
        "num_kv_heads": 1,
        "norm": "rms",
        "norm_gain": False,
        "tie_weights": False,
    },
    "seed-modern": {
        "kind": "seed",
        "context_window": 8,
        "embedding_dim": 12,
        "num_heads": 3,
        **seed_switches(ALL_SWITCHES),  # every switch the seed model has
    },
}


@pytest.fixture(scope="module")
def browser():
    with chromium() as b:
        yield b


def page_of(tmp_path, name: str, vocab: list[str], weights: str = "auto"):
    checkpoint, text = tmp_path / f"{name}.ckpt", tmp_path / f"{name}.txt"
    write_checkpoint(checkpoint, MODELS[name], vocab, spread=0.3)
    text.write_text("".join(vocab) * 3, encoding="utf-8")
    out = write_explorer(checkpoint, tmp_path / f"{name}-{weights}.html", tmp_path, text=str(text), weights=weights)
    return checkpoint, out


def type_text(page, text: str) -> None:
    """Replace the text box's content as a user would, and wait for the views to follow."""
    page.fill("#prompt", text)
    page.evaluate("window.scratchgpt.settled()")


def torch_predict(checkpoint, text: str) -> tuple[torch.Tensor, list[torch.Tensor], str]:
    """What the page must show for `text`: PyTorch's probabilities and attention at its last position."""
    trained = load_trained(checkpoint)
    known = [ch for ch in text if ch in trained.tokenizer.index]
    window = "".join(known[-trained.model.context_window :])
    ids = trained.tokenizer.encode(window).unsqueeze(0)
    with torch.no_grad():
        logits, _ = trained.model(ids)
        attention = trained.model.attention_maps(ids)  # the plain path's weights, per layer (1, h, T, T)
    return torch.softmax(logits[0, -1].double(), -1), [a[0].double() for a in attention], window


PROMPTS = [
    "First Citizen:",  # ASCII, shorter than every window
    "Before we proceed any further, hear me speak.",  # longer than the window: cropped to its end
    "F",  # one character
    "Fir€st",  # a character outside the vocabulary: shown, skipped
]


@pytest.mark.parametrize("name", list(MODELS))
def test_predict_equals_pytorch_for_every_model_option(tmp_path, browser, name):
    checkpoint, page_file = page_of(tmp_path, name, ASCII)
    opened = open_page(browser, page_file)
    assert opened.errors == [] and opened.requests == []
    assert opened.page.evaluate("window.scratchgpt.vocab") == ASCII
    for prompt in PROMPTS:
        got = opened.page.evaluate("(t) => window.scratchgpt.predict(t)", prompt)
        probs, attention, window = torch_predict(checkpoint, prompt)
        assert got["window"] == window
        assert got["unknown"] == (["€"] if "€" in prompt else [])
        assert torch.allclose(torch.tensor(got["probs"], dtype=torch.float64), probs, atol=1e-5, rtol=0)
        assert len(got["attention"]) == len(attention)
        for page_layer, torch_layer in zip(got["attention"], attention, strict=True):
            weights = torch.tensor(page_layer, dtype=torch.float64)  # (h, T, T)
            assert weights.shape == torch_layer.shape
            assert torch.allclose(weights, torch_layer, atol=1e-5, rtol=0)
            assert torch.allclose(weights.sum(-1), torch.ones(weights.shape[:2], dtype=torch.float64), atol=1e-12)
            T = weights.shape[-1]
            assert (weights[:, torch.ones(T, T, dtype=torch.bool).triu(1)] == 0).all()  # exact zeros: the future
        lens = torch.tensor(got["lens"], dtype=torch.float64)
        assert lens.shape == (len(attention) + 1, len(ASCII))  # the input of the first layer, then each layer
        assert torch.allclose(lens[-1], probs, atol=1e-5, rtol=0)  # read after the last layer: the output
        assert torch.allclose(lens.sum(-1), torch.ones(len(lens), dtype=torch.float64), atol=1e-9)


@pytest.mark.parametrize("name", ["gpt", "seed"])
def test_a_cjk_and_emoji_model_and_the_empty_text(tmp_path, browser, name):
    checkpoint, page_file = page_of(tmp_path, name, CJK_EMOJI)
    opened = open_page(browser, page_file)
    for prompt in ["春夏😀", "a 🎉山\n水", "😀" * 20]:
        got = opened.page.evaluate("(t) => window.scratchgpt.predict(t)", prompt)
        probs, _, window = torch_predict(checkpoint, prompt)
        assert got["window"] == window  # an emoji is one character, as in Python
        assert torch.allclose(torch.tensor(got["probs"], dtype=torch.float64), probs, atol=1e-5, rtol=0)
    # Nothing to predict from: PyTorch refuses an empty sequence; the page says so and raises nothing.
    empty = opened.page.evaluate("window.scratchgpt.predict('')")
    assert empty["probs"] is None and empty["attention"] == [] and empty["window"] == ""
    type_text(opened.page, "")
    assert "Type at least one character" in opened.page.inner_text("#bars")
    type_text(opened.page, "€€")
    assert "not in the vocabulary" in opened.page.inner_text("#window-note")
    assert opened.errors == []


def test_float16_weights_stay_close_and_halve_the_page(tmp_path, browser):
    checkpoint, full = page_of(tmp_path, "gpt", ASCII, weights="float32")
    _, half = page_of(tmp_path, "gpt", ASCII, weights="float16")
    numbers = sum(v.numel() for v in load_trained(checkpoint).model.state_dict().values())
    saved = full.stat().st_size - half.stat().st_size
    assert saved == pytest.approx(numbers * 2 * 4 / 3, rel=0.01)  # 2 bytes fewer a number, in base64
    opened = open_page(browser, half)
    got = opened.page.evaluate("(t) => window.scratchgpt.predict(t)", "First Citizen:")
    probs, _, _ = torch_predict(checkpoint, "First Citizen:")
    assert torch.allclose(torch.tensor(got["probs"], dtype=torch.float64), probs, atol=2e-3, rtol=0)


def test_the_sampler_controls_filter_as_our_sampler_does(tmp_path, browser):
    checkpoint, page_file = page_of(tmp_path, "gpt", ASCII)
    opened = open_page(browser, page_file)
    trained = load_trained(checkpoint)
    ids = trained.tokenizer.encode("First Citizen:"[-trained.model.context_window :]).unsqueeze(0)
    with torch.no_grad():
        logits = trained.model(ids)[0][:, -1].double()
    settings = [(1.0, None, None), (0.7, 5, None), (1.3, None, 0.8), (0.5, 3, 0.6), (2.0, 40, 0.95)]
    for temperature, top_k, top_p in settings:
        got = opened.page.evaluate(
            "([t, k, p]) => window.scratchgpt.distribution('First Citizen:', {temperature: t, topK: k, topP: p})",
            [temperature, top_k, top_p],
        )
        expected = next_token_distribution(logits, temperature, top_k, top_p)[0]
        assert torch.allclose(torch.tensor(got, dtype=torch.float64), expected, atol=1e-6, rtol=0)
    # The controls redraw the bars with the same numbers.
    page = opened.page
    type_text(page, "First Citizen:")
    page.fill("#top-k", "3")
    page.fill("#top-p", "0.9")
    page.eval_on_selector("#temperature", "(e) => { e.value = '0.5'; e.dispatchEvent(new Event('input')); }")
    expected = next_token_distribution(logits, 0.5, 3, 0.9)[0]
    shown = [float(v.rstrip("%")) for v in page.locator(".bar-value").all_inner_texts()]
    top = sorted(expected.tolist(), reverse=True)[: len(shown)]
    assert shown == pytest.approx([round(100 * p, 1) for p in top], abs=0.051)
    assert sum(p > 0 for p in shown) <= 3  # top-k 3 leaves at most three


@pytest.fixture(scope="module")
def trained_page(trained):
    """The explore.html that the session's tiny training run wrote at its end."""
    run_dir, output = trained
    page = run_dir / "explore.html"
    assert page.is_file()
    assert f"see inside it: open {page.resolve().as_uri()}" in output  # named beside the TensorBoard hint
    return run_dir, page


@pytest.mark.slow
def test_greedy_writing_in_the_page_equals_generate(trained_page, browser):
    run_dir, page_file = trained_page
    opened = open_page(browser, page_file)
    page = opened.page
    type_text(page, "First")
    for _ in range(100):
        page.click("#argmax")
    written = page.input_value("#prompt")
    result = run_main("generate", f"ckpt_path={run_dir}", "prompt=First", "greedy=true", "max_new_tokens=100")
    assert result.returncode == 0, result.stderr
    assert written == result.stdout.rstrip("\n") and len(written) == len("First") + 100
    page.click("#back")
    assert page.input_value("#prompt") == written[:-1]  # step back removes what was written last
    assert opened.errors == [] and opened.requests == []


@pytest.mark.slow
def test_the_failure_view_scores_the_excerpt_as_evaluate_does(trained_page, browser):
    run_dir, page_file = trained_page
    opened = open_page(browser, page_file)
    excerpt = opened.page.evaluate("window.scratchgpt.excerpt()")
    result = run_main("evaluate", f"ckpt_path={run_dir}", "val_tokens=2000")
    assert result.returncode == 0, result.stderr
    val_loss = float(re.search(r"^val\s+([0-9.]+)", result.stdout, re.M).group(1))
    assert excerpt["count"] == 1999  # every character but the first is predicted once
    assert excerpt["meanLoss"] == pytest.approx(val_loss, abs=1e-4)
    summary = opened.page.inner_text("#fail-summary")
    best = load_trained(run_dir / "checkpoints" / "best.ckpt").best_val_loss
    assert f"{excerpt['meanLoss']:.4f}" in summary and f"{best:.4f}" in summary
    # The run's story: its val-loss curve and the samples TensorBoard logged.
    assert opened.page.locator("svg.curve circle.val").count() >= 2
    assert opened.page.locator("#sample-step option").count() >= 2
    assert math.isfinite(best)


@pytest.mark.slow
def test_explore_command_and_its_refusals(trained_page, tmp_path):
    run_dir, _ = trained_page
    out = tmp_path / "page.html"
    result = run_cli("explore", f"ckpt_path={run_dir}", f"out={out}")  # the command line, once; main() below
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == out.resolve().as_uri() and out.stat().st_size > 10_000
    text = out.read_text(encoding="utf-8")
    assert "<script src" not in text and "<link" not in text and "url(" not in text
    assert set(re.findall(r"https?://[^\"' ]+", text)) == {"http://www.w3.org/2000/svg"}  # a name, not a fetch

    other = tmp_path / "other.ckpt"
    torch.save({"state_dict": {}, "epoch": 3}, other)
    for args, message in [
        ([f"ckpt_path={tmp_path / 'missing'}"], "does not exist"),
        ([f"ckpt_path={run_dir}", f"out={tmp_path}"], "is a folder"),
        ([f"ckpt_path={run_dir}", f"out={tmp_path / 'no' / 'page.html'}"], "does not exist"),
        ([f"ckpt_path={run_dir}", "out=/proc/page.html"], "cannot write out="),
        ([f"ckpt_path={other}", f"out={tmp_path / 'x.html'}"], "not a scratchgpt checkpoint"),
        ([f"ckpt_path={run_dir}", "weights=float64", f"out={tmp_path / 'x.html'}"], "weights must be one of"),
        ([f"ckpt_path={run_dir}", "excerpt_chars=1", f"out={tmp_path / 'x.html'}"], "excerpt_chars"),
        # Issue 48: the page was written over the very checkpoint it read, or over any other file
        ([f"ckpt_path={run_dir}", f"out={run_dir / 'checkpoints' / 'best.ckpt'}"], "this command did not write"),
        ([f"ckpt_path={run_dir}", f"out={other}"], "is an existing file this command did not write"),
        ([f"ckpt_path={run_dir}", "prompt='ab\udcffc'", f"out={tmp_path / 'x.html'}"], "not UTF-8 text at character 3"),
    ]:
        refused = run_main("explore", *args)
        assert refused.returncode == 2, (args, refused.stderr)
        lines = refused.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], (args, refused.stderr)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other.ckpt", "page.html"]  # nothing else written
    assert torch.load(other, weights_only=False) == {"state_dict": {}, "epoch": 3}
    assert run_main("explore", f"ckpt_path={run_dir}", f"out={out}").returncode == 0  # its own page it replaces


def test_attention_and_lens_views_follow_the_mouse_and_the_text(tmp_path, browser):
    _, page_file = page_of(tmp_path, "gpt", ASCII)
    page = open_page(browser, page_file).page
    type_text(page, "Before we")
    show(page, "attention-section")
    heads = page.locator("#att-heads canvas")
    assert heads.count() == 2 * 4  # every layer and head
    heads.nth(6).click()  # layer 1, head 2
    assert page.inner_text("#att-caption").startswith('layer 1, head 2: the weights that position 8 ("e")')
    page.hover("#att-text .ch >> nth=3")
    assert 'position 3 ("o")' in page.inner_text("#att-caption")
    page.click("#att-text .ch >> nth=2")  # pinned: moving away keeps it
    page.hover("#att-text .ch >> nth=5")
    assert 'position 2 ("f")' in page.inner_text("#att-caption")
    rows = page.locator("table.steps tr")
    # a header, the keys 0-2 query 2 sees (the heaviest first), one row for the 6 keys in its future
    assert rows.count() == 1 + 3 + 1 and "6 keys the mask hides" in rows.nth(4).inner_text()
    assert "−∞" in rows.nth(4).inner_text()
    show(page, "lens-section")
    lens = page.locator("table.lens tr")
    assert lens.count() == 1 + 3  # a header, the embedding, two layers
    assert lens.nth(0).locator("th").count() == 1 + 9


def test_a_model_trained_with_every_switch_equals_pytorch(tmp_path, browser):
    """Issue 33: weights trained with RoPE, RMSNorm, SwiGLU, QK-norm, GQA, the soft-cap and value
    embeddings and smeared keys (40 AdamW steps on the page's text), not drawn: the page still equals PyTorch."""
    from src.data.tokenizer import CharTokenizer
    from src.model import build_model

    text = "First Citizen:\nBefore we proceed any further, hear me speak.\n" * 8
    tokenizer = CharTokenizer.from_text(text)
    config = MODELS["gpt-modern"]
    torch.manual_seed(0)
    model = build_model(config, tokenizer.vocab_size)
    data = tokenizer.encode(text)
    T = config["context_window"]
    x = torch.stack([data[s : s + T] for s in range(0, len(data) - T - 1, 2)])
    y = torch.stack([data[s + 1 : s + T + 1] for s in range(0, len(data) - T - 1, 2)])
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a tiny model: one thread is fastest, and never stalls on a busy machine
    try:
        for _ in range(40):
            optimizer.zero_grad()
            loss = model(x, y)[1]
            loss.backward()
            optimizer.step()
    finally:
        torch.set_num_threads(threads)
    assert loss.item() < 1.5  # it learned the text (from ln 24 = 3.2)
    checkpoint = tmp_path / "trained.ckpt"
    state = {f"model.{k}": v for k, v in model.state_dict().items()}
    hparams = {"model": dict(config), "tokenizer": tokenizer.to_dict()}
    torch.save({"state_dict": state, "hyper_parameters": hparams, "global_step": 40, "best_val_loss": 1.0}, checkpoint)
    (tmp_path / "text.txt").write_text(text, encoding="utf-8")
    page = open_page(
        browser, write_explorer(checkpoint, tmp_path / "trained.html", tmp_path, text=str(tmp_path / "text.txt"))
    )
    assert page.errors == []
    for prompt in PROMPTS[:3]:
        got = page.page.evaluate("(t) => window.scratchgpt.predict(t)", prompt)
        probs, attention, _ = torch_predict(checkpoint, prompt)
        assert torch.allclose(torch.tensor(got["probs"], dtype=torch.float64), probs, atol=1e-5, rtol=0)
        for page_layer, torch_layer in zip(got["attention"], attention, strict=True):
            assert torch.allclose(torch.tensor(page_layer, dtype=torch.float64), torch_layer, atol=1e-5, rtol=0)
