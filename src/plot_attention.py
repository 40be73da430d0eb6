"""`python -m src.plot_attention ckpt_path=... prompt=... out=attention.png`: where each head looks.

Writes one PNG with a row per layer and a panel per head, the same picture TensorBoard shows
during training, for any checkpoint and prompt.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from omegaconf import DictConfig

from src.plots import attention_figure, save_png
from src.run.cli import command
from src.training.checkpoint import describe, find_checkpoint, load_trained, run_dir_of


def run(cfg: DictConfig) -> Path:
    path = find_checkpoint(cfg.ckpt_path, cfg.paths.log_dir)
    trained = load_trained(path)
    prompt = cfg.prompt.replace("\\n", "\n")[-trained.model.context_window :]
    if not prompt:
        raise ValueError("the prompt is empty: pass prompt=... with at least one character")
    ids = trained.tokenizer.encode(prompt, "prompt")
    out = Path(cfg.out) if cfg.out is not None else run_dir_of(path) / "attention.png"
    if out.is_dir():
        raise ValueError(f"out={out} is a folder: give a file name, e.g. out={out / 'attention.png'}")
    if not out.parent.is_dir():
        raise ValueError(f"cannot write {out}: the folder {out.parent} does not exist")
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
