"""A callback the benchmarks add to the real training command: per-step times, validation times."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import lightning as L


class StepTimer(L.Callback):
    """Writes {"step_seconds": [...], "validations": [[step, val_loss, unix_time], ...]} to `path`.

    A step's time runs from the end of the previous training batch to the end of this one, so
    it holds everything the loop does per step (data, forward, backward, optimizer, logging,
    progress bar); steps with a validation in between are left out.
    """

    def __init__(self, path: str):
        self.path = Path(path)
        self.step_seconds: list[float] = []
        self.validations: list[list[float]] = []
        self.last_end: float | None = None

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, *args: Any) -> None:
        now = time.perf_counter()
        if self.last_end is not None:
            self.step_seconds.append(now - self.last_end)
        self.last_end = now

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.last_end = None

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        loss = trainer.callback_metrics.get("val/loss")
        if loss is not None and not trainer.sanity_checking:
            self.validations.append([trainer.global_step, float(loss), time.time()])
            self._write()  # also written per validation: a time-to-loss run may be stopped early
        self.last_end = None

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._write()

    def _write(self) -> None:
        if self.path.parent.is_dir():
            self.path.write_text(json.dumps({"step_seconds": self.step_seconds, "validations": self.validations}))
