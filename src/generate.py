"""`python -m src.generate ckpt_path=... prompt="ROMEO:"`: continue a prompt with a trained model."""

from __future__ import annotations

import sys

import torch
from omegaconf import DictConfig

from src.cli import hydra_entry
from src.model.sampling import check_sampling_args, sample_text
from src.training.checkpoint import find_checkpoint, load_trained


def pick_device(setting: str) -> torch.device:
    if setting == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if setting.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"device={setting} asks for a GPU but none is available: use device=cpu or device=auto")
    return torch.device(setting)


@hydra_entry(config_name="generate")
def main(cfg: DictConfig) -> str:
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


if __name__ == "__main__":
    main()
