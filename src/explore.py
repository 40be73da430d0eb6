"""`python -m src.explore ckpt_path=<run dir | .ckpt | last> [out=<file.html>]`: see inside a trained model.

One self-contained HTML page (no server, no network) in which the checkpoint's model runs
(docs/explorer.md); every training run writes one from its best.ckpt (`explorer=false`: not).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from omegaconf import DictConfig

import src.training.lightning_import  # noqa: F401  (first: Lightning without scipy.signal)
from src import rules
from src.explorer.page import write_explorer
from src.explorer.payload import EXCERPT_MAX_CHARS, WEIGHT_DTYPES
from src.run.cli import command
from src.training.checkpoint import find_checkpoint, run_dir_of


def check_out(out: Path) -> None:
    """Refuse an output the page cannot be written to, before any work."""
    if out.is_dir():
        raise ValueError(f"out={out} is a folder: give a file name, e.g. out={out / 'explore.html'}")
    if not out.parent.is_dir():
        raise ValueError(f"cannot write out={out}: the folder {out.parent} does not exist")
    probe = out.with_name(f".{out.name}.partial-{os.getpid()}")  # where write_page writes first
    try:
        probe.touch()
        probe.unlink()
    except OSError as err:
        raise ValueError(f"cannot write out={out}: {err.strerror}; choose another out=<file.html>") from None


def run(cfg: DictConfig) -> Path:
    if not rules.is_int(cfg.excerpt_chars) or not 2 <= cfg.excerpt_chars <= EXCERPT_MAX_CHARS:
        rules.refuse(
            "excerpt_chars",
            cfg.excerpt_chars,
            f"an integer from 2 to {EXCERPT_MAX_CHARS:,}",
            "how many characters 'Where it fails' scores in the browser (the page keeps within its 8 MB)",
        )
    rules.choice("weights", cfg.weights, WEIGHT_DTYPES)
    checkpoint = find_checkpoint(cfg.ckpt_path, cfg.paths.log_dir)
    out = Path(cfg.out).expanduser() if cfg.out is not None else run_dir_of(checkpoint) / "explore.html"
    check_out(out)
    prompt = cfg.prompt.replace("\\n", "\n") if cfg.prompt is not None else None
    write_explorer(checkpoint, out, cfg.paths.data_dir, prompt, cfg.text, cfg.excerpt_chars, cfg.weights)
    print(f"checkpoint: {checkpoint}", file=sys.stderr)
    print(f"{out.resolve().as_uri()}")
    return out


def main() -> None:
    command("explore", run)


if __name__ == "__main__":
    main()
