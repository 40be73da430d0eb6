"""`python -m src.generate ckpt_path=... prompt="ROMEO:" num_samples=3`: continue a prompt with a trained model.

The text streams to the terminal as it is drawn. `num_samples` samples are drawn together, as
one batch: the first one streams, the others are printed when the batch is done, each sample
followed by a line of dashes (as nanoGPT's sample.py prints them). Sample i is drawn with
seed + i, so `seed=<seed + i> num_samples=1` prints it again alone.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig

from src.data.tokenizer import PrintableStream, printable
from src.model.checks import sampling, setting
from src.model.generation import sample_generators, stream
from src.rules import positive_int, sample_fits, seed
from src.run.cli import command
from src.run.config import CHECKPOINT, PATHS, TOP_K, TOP_P
from src.training.checkpoint import describe, find_checkpoint, load_trained, pick_device


@dataclass
class GenerateSchema:
    ckpt_path: str | None = setting(None, CHECKPOINT)
    prompt: str = setting("ROMEO:", "the text to continue; every character must be in the model's vocabulary")
    max_new_tokens: int = setting(500, "characters to write after the prompt")
    num_samples: int = setting(1, "samples drawn together as one batch; sample i uses seed + i")
    temperature: float = setting(0.8, "0 = greedy")
    top_k: int | None = setting(None, TOP_K)
    top_p: float | None = setting(None, TOP_P)
    greedy: bool = setting(False, "true: always the most likely character (temperature is ignored)")
    seed: int | None = setting(1337, "null = a different sample every time")
    device: str = setting("auto", "auto = a GPU when there is one, else cpu")
    paths: Any = setting(None, PATHS)


ConfigStore.instance().store(name="generate_schema", node=GenerateSchema)  # conf/generate.yaml names it


SEPARATOR = "-" * 15


def run(cfg: DictConfig) -> list[str]:
    sampling("", cfg.max_new_tokens, cfg.temperature, cfg.top_k, cfg.top_p)  # before loading anything
    positive_int("num_samples", cfg.num_samples, "e.g. num_samples=3")
    if cfg.seed is not None:  # null: unseeded
        seed("seed", cfg.seed, cfg.num_samples)
    sample_fits("max_new_tokens", cfg.max_new_tokens, cfg.num_samples)
    path = find_checkpoint(cfg.ckpt_path, cfg.paths.log_dir)
    trained = load_trained(path)
    device = pick_device(cfg.device)
    trained.model.to(device)
    prompt = cfg.prompt.replace("\\n", "\n")  # a typed \n means a new line
    prompt_ids = trained.tokenizer.encode(prompt, "prompt").to(device)  # refuses unknown characters before printing
    print("\n".join(describe(path, trained, chosen=cfg.ckpt_path is None)), file=sys.stderr)

    vocab, out = trained.tokenizer.vocab, PrintableStream(sys.stdout)  # a text's control characters escaped
    new_ids: list[list[int]] = []  # per step, the ids of every sample
    out.write(prompt)
    tokens = stream(
        trained.model,
        prompt_ids.expand(cfg.num_samples, -1),  # (num_samples, T): one batch
        cfg.max_new_tokens,
        cfg.temperature,
        cfg.top_k,
        cfg.top_p,
        cfg.greedy,
        generator=sample_generators(cfg.seed, cfg.num_samples, device),
    )
    try:
        for ids in tokens:
            new_ids.append(ids.tolist())
            out.write(vocab[new_ids[-1][0]])  # the first sample, as it is drawn
    except KeyboardInterrupt:
        out.write("\n")
        out.close()
        sys.exit(130)
    texts = [prompt + "".join(vocab[step[i]] for step in new_ids) for i in range(cfg.num_samples)]
    out.write("\n")
    out.close()
    if cfg.num_samples > 1:
        print(SEPARATOR)
        for text in texts[1:]:
            print(printable(text))
            print(SEPARATOR)
    return texts


def main() -> None:
    command("generate", run)


if __name__ == "__main__":
    main()
