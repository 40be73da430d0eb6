"""`python -m src.plot_attention ckpt_path=... prompt=... out=attention.png`: where each head looks.

Writes one PNG with a row per layer and a panel per head, the same picture TensorBoard shows
during training, for any checkpoint and prompt.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig

from src import rules
from src.model.checks import setting
from src.plots import attention_figure, save_png
from src.run.cli import command
from src.run.config import CHECKPOINT, PATHS
from src.training.checkpoint import describe, find_checkpoint, load_trained, run_dir_of


@dataclass
class PlotAttentionSchema:
    ckpt_path: str | None = setting(None, CHECKPOINT)
    prompt: str = setting("ROMEO:\nO, she doth teach the torch", "cropped to its last context_window characters")
    out: str | None = setting(None, "null: attention.png in the checkpoint's run directory")
    paths: Any = setting(None, PATHS)


ConfigStore.instance().store(
    name="plot_attention_schema", node=PlotAttentionSchema
)  # conf/plot_attention.yaml names it


def run(cfg: DictConfig) -> Path:
    path = find_checkpoint(cfg.ckpt_path, cfg.paths.log_dir)
    out = Path(cfg.out) if cfg.out is not None else run_dir_of(path) / "attention.png"
    rules.output_file(out, b"\x89PNG", "attention.png")
    trained = load_trained(path)
    prompt = cfg.prompt.replace("\\n", "\n")[-trained.model.context_window :]
    if not prompt:
        raise ValueError("the prompt is empty: pass prompt=... with at least one character")
    ids = trained.tokenizer.encode(prompt, "prompt")
    with torch.no_grad():
        maps = trained.model.attention_maps(ids.unsqueeze(0))  # per layer: (1, h, T, T)
    title = f"{path} (step {trained.global_step}): attention over {len(prompt)} characters"
    try:
        save_png(attention_figure([w[0] for w in maps], list(prompt), title), str(out))
    except OSError as err:
        raise ValueError(f"cannot write out={out} ({err.strerror or err}): choose a writable place for out=") from None
    print("\n".join(describe(path, trained, chosen=cfg.ckpt_path is None)), file=sys.stderr)
    print(out)
    return out


def main() -> None:
    command("plot_attention", run)


if __name__ == "__main__":
    main()
