"""Callbacks that report how training goes: throughput and a tidy progress bar."""

from __future__ import annotations

import time
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import TQDMProgressBar


class TokensPerSecond(L.Callback):
    """Logs `train/tokens_per_sec`: training tokens (all ranks) per second of training time.

    Measured over the steps between two log points, with validation time left out, so it is
    the speed of the training step itself. It reads only the wall clock: no device syncs.
    """

    def __init__(self) -> None:
        self.window_start: float | None = None
        self.window_tokens = 0

    def _restart(self) -> None:
        self.window_start, self.window_tokens = time.perf_counter(), 0

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._restart()

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._restart()

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        self.window_tokens += batch[0].numel() * trainer.world_size
        if trainer.global_step % max(1, trainer.log_every_n_steps) != 0 or self.window_start is None:
            return
        elapsed = time.perf_counter() - self.window_start
        if elapsed > 0:
            pl_module.log("train/tokens_per_sec", self.window_tokens / elapsed, prog_bar=True)
        self._restart()


class ProgressBar(TQDMProgressBar):
    """Lightning's bar without the version number, showing the loss and tokens/s."""

    def get_metrics(self, trainer: L.Trainer, pl_module: L.LightningModule) -> dict[str, Any]:
        metrics = super().get_metrics(trainer, pl_module)
        metrics.pop("v_num", None)
        return metrics


class ValidationReport(L.Callback):
    """Prints one line per validation, so logs read well with or without a progress bar."""

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.sanity_checking or not trainer.is_global_zero:
            return
        m = trainer.callback_metrics
        if "val/loss" not in m:
            return
        line = (
            f"step {trainer.global_step:>6} | val loss {m['val/loss']:.4f} | bpc {m['val/bpc']:.3f} "
            f"| ppl {m['val/ppl']:.2f} | acc {m['val/acc']:.3f}"
        )
        if "train/tokens_per_sec" in m:
            line += f" | {m['train/tokens_per_sec']:,.0f} tokens/s"
        bar = trainer.progress_bar_callback
        (bar.print if bar is not None and bar.is_enabled else print)(line)
