"""`python -m benchmarks.train_speed --only loop`: what Lightning's training loop costs per step at
the notes' scale (1 layer, 2 heads, 30 dims, block 10, batch 12), where a step is milliseconds.

Each variant trains the same model on the same DataModule for 1000 steps in a process of its own
(`python -m benchmarks.lightning_loop <variant> <threads>`), in alternating rounds:

  bare       a plain loop: forward, backward, clipping at 1.0, fused AdamW, zero_grad
  automatic  Lightning's Trainer.fit as train.py uses it, without callbacks, logger or checkpoints
  manual     the same fit with manual optimization (the step written in training_step): the
             alternative design this measures, not used by the project (see BENCHMARKS.md)

A step's time is the median over steps 100-1000 of the wall between two step ends.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
import warnings
from typing import Any

import torch

STEPS, WARMUP = 1000, 100
VARIANTS = (("bare", 2), ("automatic", 2), ("manual", 2), ("automatic", 1))
NOTES_SCALE = [
    "model.num_layers=1",
    "model.num_heads=2",
    "model.embedding_dim=30",
    "model.context_window=10",
    "data.batch_size=12",
]


def run(args: Any) -> dict[str, Any]:
    """Every variant once per round, each in a fresh process; medians over the rounds."""
    rounds: dict[str, list[float]] = {f"{v}, {t} threads": [] for v, t in VARIANTS}
    for _ in range(args.rounds):
        for variant, threads in VARIANTS:
            out = subprocess.run(
                [sys.executable, "-m", "benchmarks.lightning_loop", variant, str(threads)],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            rounds[f"{variant}, {threads} threads"].append(float(out.split()[-1]))
    return {"median_ms": {k: statistics.median(v) for k, v in rounds.items()}, "rounds": rounds}


def table_rows(results: dict[str, Any]) -> list[str]:
    return [
        f"| training step at the notes' scale, {name}: median ms | {ms:.2f} | | |"
        for name, ms in results["median_ms"].items()
    ]


def measure(variant: str, threads: int) -> float:
    """Median ms per step of one variant, in this process."""
    warnings.filterwarnings("ignore")
    torch.set_num_threads(threads)
    import lightning as L

    from benchmarks.recipe import data_and_model
    from src.training.gpt_module import GPTModule
    from src.training.optim import build_optimizer

    class ManualGPT(GPTModule):
        def __init__(self, **kwargs: Any):
            super().__init__(**kwargs)
            self.automatic_optimization = False

        def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
            _, loss = self.model(*batch)
            self.manual_backward(loss)
            torch.nn.utils.clip_grad_norm_(list(self.parameters()), 1.0)
            optimizer = self.optimizers()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            self.lr_schedulers().step()
            return loss

    cfg, datamodule, lit = data_and_model(NOTES_SCALE, ManualGPT if variant == "manual" else GPTModule)
    ends: list[float] = []
    if variant == "bare":
        optimizer = build_optimizer(lit.model, cfg.optimizer)
        batches = iter(datamodule.train_dataloader())
        for _ in range(STEPS):
            _, loss = lit.model(*next(batches))
            loss.backward()
            torch.nn.utils.clip_grad_norm_(lit.model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            ends.append(time.perf_counter())
    else:

        class StepEnds(L.Callback):
            def on_train_batch_end(self, *args: Any) -> None:
                ends.append(time.perf_counter())

        L.Trainer(
            max_steps=STEPS,
            logger=False,
            callbacks=[StepEnds()],
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            limit_val_batches=0,
            num_sanity_val_steps=0,
            accelerator="cpu",
            devices=1,
            gradient_clip_val=None if variant == "manual" else 1.0,
        ).fit(lit, datamodule=datamodule)
    steps = [b - a for a, b in zip(ends[WARMUP:], ends[WARMUP + 1 :], strict=False)]
    return statistics.median(steps) * 1000


if __name__ == "__main__":
    print(f"{measure(sys.argv[1], int(sys.argv[2])):.4f}")
