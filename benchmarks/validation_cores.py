"""`python -m benchmarks.train_speed --only validation`: the exact validation pass, in one forward
pass per batch on torch's intra-op threads, against one part of each batch per core
(src/training/gpt_module.py), in alternating rounds.

The model is `experiment=nanogpt_cpu`'s baby GPT (untrained weights: the time does not depend on
them), the split all 111,539 characters of Tiny Shakespeare's val split, each pass Lightning's
`trainer.validate` as a training run calls it, with the batches that training uses.
"""

from __future__ import annotations

import logging
import statistics
import time
from typing import Any

import lightning as L
import torch

from benchmarks.recipe import data_and_model
from src.data.datamodule import TextDataModule
from src.training import gpt_module
from src.training.gpt_module import GPTModule

VARIANTS = ("one forward pass per batch", "one part per core")


def _validate_seconds(trainer: L.Trainer, lit: GPTModule, data: TextDataModule, split: bool) -> tuple[float, float]:
    part_tokens = gpt_module.MIN_PART_TOKENS
    if not split:
        gpt_module.MIN_PART_TOKENS = 2**62  # no batch is long enough to split: one pass, as before
    try:
        start = time.perf_counter()
        trainer.validate(lit, datamodule=data, verbose=False)
        return time.perf_counter() - start, trainer.callback_metrics["val/loss"].item()
    finally:
        gpt_module.MIN_PART_TOKENS = part_tokens


def run(args: Any) -> dict[str, Any]:
    logging.getLogger("lightning").setLevel(logging.WARNING)
    _, data, lit = data_and_model(["experiment=nanogpt_cpu"])  # its val_tokens cover the whole split
    trainer = L.Trainer(logger=False, enable_progress_bar=False, enable_model_summary=False)
    seconds: dict[str, list[float]] = {v: [] for v in VARIANTS}
    losses: dict[str, float] = {}
    for _ in range(args.rounds):
        for variant in VARIANTS:
            elapsed, losses[variant] = _validate_seconds(trainer, lit, data, split=variant == VARIANTS[1])
            seconds[variant].append(elapsed)
            print(f"  {variant}: {elapsed:.2f} s, val/loss {losses[variant]:.7f}", flush=True)
    median = {v: statistics.median(s) for v, s in seconds.items()}
    return {
        "positions": len(data.scored("val")) - 1,
        "threads": torch.get_num_threads(),
        "batch_windows": data.eval_batch_size(),
        "seconds": seconds,
        "median_s": median,
        "val_loss": losses,
        "speedup": median[VARIANTS[0]] / median[VARIANTS[1]],
    }


def table_rows(result: dict[str, Any]) -> list[str]:
    one, split = (result["median_s"][v] for v in VARIANTS)
    return [
        f"| exact validation, baby model ({result['positions']:,} positions, {result['batch_windows']} windows a batch,"
        f" {result['threads']} threads): one forward pass per batch vs one part per core, s"
        f" | {one:.2f} vs {split:.2f} | | {result['speedup']:.2f}x |"
    ]
