"""What the explorer's tests and its benchmark share: headless Chromium (Debian's chromium, driven by
Playwright) and checkpoints of models with given weights to open pages of.

No browser is downloaded: `make test` installs Debian's package (Makefile, `browser`), and a missing
browser is an error that says so, never a skipped test.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from playwright.sync_api import Browser, Page, sync_playwright

from src.data.tokenizer import CharTokenizer
from src.model import build_model

CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]


def chromium_path() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        raise RuntimeError("Chromium is not installed: `make test` installs it (Debian's chromium package)")
    return found


@contextmanager
def chromium() -> Iterator[Browser]:
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


@dataclass
class Opened:
    """A page as a user opened it, with what went wrong on the way."""

    page: Page
    errors: list[str] = field(default_factory=list)  # console errors and uncaught exceptions
    requests: list[str] = field(default_factory=list)  # every request beyond the file itself (all blocked)


def open_page(browser: Browser, path: Path, width: int = 1400, height: int = 1000, timeout_s: float = 60) -> Opened:
    """Open `path` from file:// with the network blocked, and wait until the explorer has drawn."""
    page = browser.new_page(viewport={"width": width, "height": height})
    opened = Opened(page)
    page.on("console", lambda m: opened.errors.append(f"{m.type}: {m.text}") if m.type == "error" else None)
    page.on("pageerror", lambda e: opened.errors.append(f"uncaught: {e}"))
    url = path.resolve().as_uri()

    def block(route):
        if route.request.url != url:
            opened.requests.append(route.request.url)
            return route.abort()
        return route.continue_()

    page.route("**/*", block)
    page.set_default_timeout(timeout_s * 1000)
    page.goto(url)
    page.wait_for_function("window.scratchgpt !== undefined && window.scratchgpt.drawn === true")
    return opened


def show(page: Page, *sections: str) -> None:
    """Scroll each section (by id) into sight and wait until its view is drawn from the page's state of
    now: a keystroke draws only the views in sight, a view below the fold when it is scrolled to."""
    for section in sections:
        page.locator(f"#{section}").scroll_into_view_if_needed()
        page.wait_for_selector(f"#{section}:not([data-stale])", state="attached")


def write_checkpoint(path: Path, model_config: dict[str, Any], vocab: list[str], spread: float = 0.0) -> None:
    """A checkpoint as training writes it, of a model with its initial weights plus N(0, spread^2) noise
    (the tests spread them so that distributions and attention are far from uniform), seeded."""
    torch.manual_seed(0)
    tokenizer = CharTokenizer(vocab)
    model = build_model(model_config, tokenizer.vocab_size)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * spread)
    hparams = {"model": dict(model_config), "tokenizer": tokenizer.to_dict()}
    state = {f"model.{k}": v for k, v in model.state_dict().items()}
    torch.save({"state_dict": state, "hyper_parameters": hparams, "global_step": 7, "best_val_loss": 2.5}, path)
