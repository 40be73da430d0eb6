"""One self-contained HTML file: the template of static/ with its style, scripts and the payload inline."""

from __future__ import annotations

import html
import json
import os
from pathlib import Path
from typing import Any

from src.explorer.payload import excerpt_of, page_payload
from src.training.checkpoint import Trained, load_trained

STATIC = Path(__file__).parent / "static"
SCRIPTS = ("kernel.js", "model.js", "circuits.js", "sampling.js", "views.js")  # in order: each uses those before it


def render(payload: dict[str, Any]) -> str:
    """The page's HTML. The JSON sits in a <script type="application/json"> block; every "<" in it
    (only ever inside a string: a vocabulary holding "<", a sample) is written \\u003c, so that no
    text of the model's can end the block early."""
    data = json.dumps(payload, ensure_ascii=False, separators=(",", ":")).replace("<", "\\u003c")
    scripts = "\n".join((STATIC / name).read_text(encoding="utf-8") for name in SCRIPTS)
    page = (STATIC / "explorer.html").read_text(encoding="utf-8")
    for key, value in (
        ("{{TITLE}}", html.escape(payload["title"])),
        ("{{CSS}}", (STATIC / "explorer.css").read_text(encoding="utf-8")),
        ("{{SCRIPTS}}", scripts),
        ("{{PAYLOAD}}", data),
    ):
        page = page.replace(key, value, 1)
    return page


def write_page(page: str, out: Path) -> None:
    """Write beside `out`, then rename over it: a reader (or a killed run) never sees half a page."""
    partial = out.with_name(f".{out.name}.partial-{os.getpid()}")
    try:
        partial.write_text(page, encoding="utf-8")
        os.replace(partial, out)
    finally:
        partial.unlink(missing_ok=True)


def write_explorer(
    checkpoint: Path,
    out: Path,
    data_dir: str | Path,
    prompt: str | None = None,
    text: str | None = None,
    excerpt_chars: int = 2000,
    weights: str = "auto",
    trained: Trained | None = None,
    excerpt: tuple[str, str] | None = None,
) -> Path:
    """The page of `checkpoint`, written to `out`: what `python -m src.explore` and every training run do.

    trained: the checkpoint already loaded (a training run's final sample loaded it), else it is loaded here;
    excerpt: the text of "Where it fails" and its source, if the caller has it, else read from the data."""
    trained = trained or load_trained(checkpoint)
    excerpt = excerpt or excerpt_of(trained.hparams, data_dir, text, excerpt_chars)
    write_page(render(page_payload(trained, checkpoint, excerpt, prompt, weights)), out)
    return out
