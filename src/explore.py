"""`python -m src.explore ckpt_path=<run dir | .ckpt | last> [out=<file.html>]`: see inside a trained model.

One self-contained HTML page (no server, no network) in which the checkpoint's model runs
(docs/explorer.md); every training run writes one from its best.ckpt (`explorer=false`: not).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig

import src.training.lightning_import  # noqa: F401  (first: Lightning without scipy.signal)
from src import rules
from src.explorer.page import write_explorer
from src.explorer.payload import EXCERPT_MAX_CHARS, WEIGHT_DTYPES, excerpt_of
from src.model.checks import setting
from src.run.cli import command
from src.run.config import CHECKPOINT, PATHS
from src.training.checkpoint import find_checkpoint, load_trained, run_dir_of


@dataclass
class ExploreSchema:
    ckpt_path: str | None = setting(None, CHECKPOINT.replace("best.ckpt)", "best.ckpt) or last"))
    out: str | None = setting(None, "null = explore.html in the checkpoint's run directory")
    prompt: str | None = setting(None, "the text the page opens with; null = the first line of the excerpt")
    text: str | None = setting(None, 'a UTF-8 file for "Where it fails"; null = the checkpoint\'s own validation split')
    excerpt_chars: int = setting(2000, 'how many characters "Where it fails" scores')
    weights: str = setting("auto", "float32, float16 or auto (float16 above 1.5M parameters: BENCHMARKS.md, Explorer)")
    paths: Any = setting(None, PATHS)


ConfigStore.instance().store(name="explore_schema", node=ExploreSchema)  # conf/explore.yaml names it


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
    rules.output_file(out, b"<!doctype html", "explore.html")
    prompt = cfg.prompt.replace("\\n", "\n") if cfg.prompt is not None else None
    if prompt is not None:
        rules.utf8_text("prompt", prompt)
    trained = load_trained(checkpoint)
    excerpt = excerpt_of(trained.hparams, cfg.paths.data_dir, cfg.text, cfg.excerpt_chars)  # its source is printed
    write_explorer(checkpoint, out, cfg.paths.data_dir, prompt, weights=cfg.weights, trained=trained, excerpt=excerpt)
    print(f"checkpoint: {checkpoint}\ntext: {excerpt[1]}", file=sys.stderr)
    print(f"{out.resolve().as_uri()}")
    return out


def main() -> None:
    command("explore", run)


if __name__ == "__main__":
    main()
