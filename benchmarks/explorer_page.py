"""`python -m benchmarks.explorer_page`: the explorer page's size and speed in headless Chromium.

Measured as a user meets the page, in Debian's Chromium on this machine: the file's size; from
navigation start to the first next-character distribution drawn (the page's own performance
mark: HTML and JSON parsed, weights decoded, a forward pass, the views drawn); one keystroke at
a full window (a key typed at the end of the text box, timed from its keydown event), with the
window's characters in the box and again with 20,000 characters in it (the model reads only the
window: the time must not grow), until the views in sight are redrawn and the next frame has been
painted (two animation frames later), once
"Where it fails" has scored its excerpt and "What each head does" its probe in the background
(while they score, a keystroke may also wait for the ~30 ms slice being computed). For the
default model and for the largest preset (`experiment=nanogpt_gpu`, stored as float16 by
`weights=auto`), with each page's largest probability error against PyTorch's float32 forward pass.

`--ckpt <run dir or .ckpt>` uses a trained checkpoint for the default model (else one with the
untrained weights of the default config: the times do not depend on the weights, the float16
error does). `--screenshots DIR` writes one PNG per view of that page instead (and five at 420 px).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path
from typing import Any

import torch
from omegaconf import OmegaConf

from src.explorer.page import write_explorer
from src.run.cli import compose
from src.training.checkpoint import find_checkpoint, load_trained
from tests.explorer.browser import chromium, open_page, show, write_checkpoint

ROOT = Path(__file__).resolve().parent.parent
LONG_TEXT = 20_000  # characters in the text box for the second keystroke timing
SHAKESPEARE_VOCAB = list("\n !$&',-.3:;?ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")
# A key pressed as a user presses it (Playwright's keyboard: keydown, the browser inserts the character,
# input), timed from the keydown event's own time stamp, when the browser received the key. Setting
# the box's `value` instead would add the browser's layout of the whole text (~25 ms at 20,000
# characters in a bare textarea, against ~2 ms when typed): a cost of the program, not of the page.
KEYSTROKE = """() => { window.keystrokeTimes = new Promise((resolve) => {
  const box = document.getElementById("prompt");
  box.addEventListener("keydown", (pressed) => {
    box.addEventListener("input", async () => {
      await window.scratchgpt.settled();  // the update the event scheduled has run
      document.body.getBoundingClientRect();  // and the page is laid out again
      const updated = performance.now() - pressed.timeStamp;
      await new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));  // painted (a frame is ~16 ms)
      resolve([updated, performance.now() - pressed.timeStamp]);
    }, { once: true });
  }, { once: true });
}); }"""


def keystroke(page, ch: str) -> list[float]:
    """[views updated, next frame painted] in ms after `ch` was typed at the end of the text box."""
    page.evaluate(KEYSTROKE)
    page.keyboard.type(ch)
    return page.evaluate("window.keystrokeTimes")


def type_times(page, text: str, chars: str) -> tuple[float, float]:
    """The box holding `text`, the caret at its end: the medians of typing each of `chars`."""
    page.fill("#prompt", text)
    page.evaluate("window.scratchgpt.settled()")
    page.focus("#prompt")
    page.keyboard.press("Control+End")
    times = [keystroke(page, ch) for ch in chars]
    return statistics.median(t[0] for t in times), statistics.median(t[1] for t in times)


def preset_checkpoint(folder: Path, overrides: list[str]) -> Path:
    """An untrained checkpoint of the model a training command line would build."""
    model = compose("train", overrides).model
    path = folder / f"{'_'.join(overrides) or 'default'}.ckpt"
    write_checkpoint(path, OmegaConf.to_container(model, resolve=True), SHAKESPEARE_VOCAB)
    return path


def largest_error(page, checkpoint: Path, prompts: list[str]) -> float:
    """max |p_page - p_torch| over the vocabulary at the last position of each prompt."""
    trained = load_trained(checkpoint)
    worst = 0.0
    for prompt in prompts:
        got = torch.tensor(page.evaluate("(t) => window.scratchgpt.predict(t).probs", prompt), dtype=torch.float64)
        ids = trained.tokenizer.encode(prompt[-trained.model.context_window :]).unsqueeze(0)
        with torch.no_grad():
            expected = torch.softmax(trained.model(ids)[0][0, -1].double(), -1)
        worst = max(worst, (got - expected).abs().max().item())
    return worst


def measure(browser, page_file: Path, checkpoint: Path, text: str, rounds: int, keystrokes: int) -> dict[str, Any]:
    """`text`: at least 20,000 characters; keystrokes are timed with the text box holding a full window,
    then holding 20,000 characters (the model reads only the window: the time must not grow)."""
    window = load_trained(checkpoint).model.context_window
    first, typing, typing_long = [], [], []
    for _ in range(rounds):
        opened = open_page(browser, page_file, timeout_s=300)
        page = opened.page
        page.evaluate("window.scratchgpt.excerpt()")  # typing once "Where it fails" has scored its excerpt
        page.evaluate("window.scratchgpt.headScores()")  # and the heads their probe, in the background too
        first.append(page.evaluate("performance.getEntriesByName('distribution-drawn')[0].startTime"))
        chars = text[window : window + keystrokes]
        typing.append(type_times(page, text[:window], chars))  # a full window: every keystroke slides it
        typing_long.append(type_times(page, text[:LONG_TEXT], chars))
        assert opened.errors == [] and opened.requests == [], (opened.errors, opened.requests)
        error = largest_error(page, checkpoint, [text[:window], text[7 : 7 + window], "ROMEO:"])
        page.close()
    return {
        "megabytes": page_file.stat().st_size / 1e6,
        "first_distribution_ms": first,
        "keystroke_ms": typing,
        "keystroke_long_ms": typing_long,
        "window": window,
        "max_prob_error": error,
    }


def screenshots(browser, page_file: Path, out: Path) -> list[Path]:
    """One PNG per view, as a user sees it: a prompt typed, a query pinned, a character hovered, two
    characters sampled, the head of the largest OV positivity chosen for its circuits and switched off;
    then the top of the page, the block view, the heads' grid, the failures and the circuits on a 420 px
    wide screen."""
    out.mkdir(parents=True, exist_ok=True)
    shots = []
    for width in (1280, 420):
        opened = open_page(browser, page_file, width=width, height=900)
        page = opened.page
        page.fill("#prompt", "ROMEO:\nO, she doth teach the torches to burn bright")
        page.evaluate("window.scratchgpt.settled()")
        page.fill("#top-k", "10")
        page.evaluate("Math.random = () => 0.3")  # the same two characters sampled every time
        page.click("#sample")
        page.click("#sample")
        page.click("#att-text .ch >> nth=-3")  # pin a query near the end
        page.evaluate("window.scratchgpt.excerpt()")
        page.evaluate("window.scratchgpt.headScores()")
        views = [
            ("text-and-next", "main"),
            ("embedding", "#embed-section"),
            ("block", "#block-section"),
            ("attention", "#attention-section"),
            ("heads-side-by-side", "#heads-section"),
            ("qkv", "#qkv-section"),
            ("what-each-head-does", "#job-section"),
            ("circuits", "#circuits-section"),
            ("take-a-head-out", "#ablate-section"),
            ("lens", "#lens-section"),
            ("failures", "#fail-section"),
            ("about", "#about-section"),
        ]
        if width == 420:
            views = [
                ("phone-top", "main"),
                ("phone-block", "#block-section"),
                ("phone-heads", "#job-section"),
                ("phone-failures", "#fail-section"),
                ("phone-circuits", "#circuits-section"),
            ]
        ov = page.evaluate("window.scratchgpt.circuits().positivity.ov")
        head = max(((layer, h) for layer in range(len(ov)) for h in range(len(ov[0]))), key=lambda p: ov[p[0]][p[1]])
        for name, selector in views:
            path = out / f"{name}.png"
            if name.endswith("failures"):
                page.hover("#fail-text .ch >> nth=120")
            if name.endswith("circuits"):
                show(page, "circuits-section")
                page.select_option("#circuit-head", f"{head[0]}.{head[1]}")
            if name == "take-a-head-out":
                show(page, "ablate-section")
                page.select_option(f"#ablate select[data-head='{head[0]}.{head[1]}']", "zero")
                show(page, "ablate-section")  # the probe scored without the head, in the background
                page.wait_for_function("() => !document.getElementById('ablate').textContent.includes('scoring')")
            if selector == "main":
                page.evaluate("window.scrollTo(0, 0)")
                box = page.locator("#write-section" if width == 420 else "#next-section").bounding_box()
                clip = {"x": 0, "y": 0, "width": width, "height": box["y"] + box["height"] + 10}
                page.screenshot(path=str(path), clip=clip)
            else:
                show(page, selector.removeprefix("#"))  # drawn from the page's state when in sight
                page.locator(selector).screenshot(path=str(path))
            shots.append(path)
        assert opened.errors == [], opened.errors
        page.close()
    return shots


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ckpt", help="a trained run directory or .ckpt for the default model")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--keystrokes", type=int, default=20)
    parser.add_argument("--screenshots", type=Path, help="write one PNG per view of the --ckpt page here, and stop")
    args = parser.parse_args()
    text = (ROOT / "data" / "tinyshakespeare" / "input.txt").read_text(encoding="utf-8")[:LONG_TEXT]
    with tempfile.TemporaryDirectory() as tmp, chromium() as browser:
        folder = Path(tmp)
        default = find_checkpoint(args.ckpt, ROOT / "outputs") if args.ckpt else preset_checkpoint(folder, [])
        if args.screenshots:
            page_file = write_explorer(default, folder / "page.html", ROOT / "data")
            for path in screenshots(browser, page_file, args.screenshots):
                print(f"{path}: {path.stat().st_size / 1e3:.0f} kB")
            return
        pages = {
            "default model, float32": (default, "float32"),
            "default model, float16": (default, "float16"),
            "experiment=nanogpt_gpu, auto (float16)": (preset_checkpoint(folder, ["experiment=nanogpt_gpu"]), "auto"),
        }
        for name, (checkpoint, weights) in pages.items():
            page_file = write_explorer(checkpoint, folder / "page.html", ROOT / "data", weights=weights)
            rounds = args.rounds if "nanogpt" not in name else 1
            r = measure(browser, page_file, checkpoint, text, rounds, args.keystrokes if rounds > 1 else 5)
            print(
                f"{name}: {r['megabytes']:.2f} MB, first distribution "
                f"{', '.join(f'{t:.0f}' for t in r['first_distribution_ms'])} ms, keystroke at a full window of "
                f"{r['window']}: views updated and laid out {', '.join(f'{u:.0f}' for u, _ in r['keystroke_ms'])} ms, "
                f"next frame painted {', '.join(f'{p:.0f}' for _, p in r['keystroke_ms'])} ms; with {LONG_TEXT:,} "
                f"characters in the box: updated {', '.join(f'{u:.0f}' for u, _ in r['keystroke_long_ms'])} ms, "
                f"painted {', '.join(f'{p:.0f}' for _, p in r['keystroke_long_ms'])} ms (medians of each load), "
                f"max |p_page - p_torch| {r['max_prob_error']:.1e}",
                flush=True,
            )


if __name__ == "__main__":
    main()
