"""`python -m src.generate ckpt_path=... prompt="ROMEO:"`: continue a prompt with a trained model."""

from __future__ import annotations

import sys

import torch
from omegaconf import DictConfig

from src.cli import command
from src.model.sampling import check_sampling_args, sample_text
from src.training.checkpoint import find_checkpoint, load_trained


def pick_device(setting: str) -> torch.device:
    """`auto` (a GPU when there is one), `cpu`, `cuda` or `cuda:N`; anything else is refused with the fix."""
    if setting == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    kind, _, index = setting.partition(":")
    if setting == "cpu" or (kind == "cuda" and (not index or index.isdigit())):
        if kind == "cuda" and not torch.cuda.is_available():
            raise ValueError(f"device={setting} asks for a GPU but none is available: use device=cpu or device=auto")
        if kind == "cuda" and index and int(index) >= torch.cuda.device_count():
            raise ValueError(f"device={setting}: there are only {torch.cuda.device_count()} GPUs; use device=cuda:0")
        return torch.device(setting)
    raise ValueError(f"device={setting} is not a device this command runs on: use device=auto, cpu, cuda or cuda:N")


def run(cfg: DictConfig) -> str:
    check_sampling_args(cfg.max_new_tokens, cfg.temperature, cfg.top_k, cfg.top_p)  # before loading anything
    path = find_checkpoint(cfg.ckpt_path, cfg.paths.log_dir)
    trained = load_trained(path)
    trained.model.to(pick_device(cfg.device))
    prompt = cfg.prompt.replace("\\n", "\n")  # a typed \n means a new line
    trained.tokenizer.encode(prompt)  # refuse unknown characters before printing anything
    print(f"checkpoint: {path} (step {trained.global_step})", file=sys.stderr)
    text = sample_text(
        trained.model,
        trained.tokenizer,
        prompt,
        cfg.max_new_tokens,
        cfg.temperature,
        cfg.top_k,
        cfg.top_p,
        cfg.greedy,
        cfg.seed,
    )
    print(text)
    return text


def main() -> None:
    command("generate", run)


if __name__ == "__main__":
    main()
