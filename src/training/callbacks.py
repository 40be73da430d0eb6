"""Callbacks that report how training goes: throughput and a tidy progress bar."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import TQDMProgressBar


def is_logging_step(trainer: L.Trainer) -> bool:
    """Whether Lightning writes this step's metrics to the logger (every log_every_n_steps).

    Lightning's own predicate, valid in every hook of the step: logging on other steps would
    cost time and never be written.
    """
    return trainer._logger_connector.should_update_logs


class TokensPerSecond(L.Callback):
    """Logs `train/tokens_per_sec`: training tokens (all ranks) per second of training time.

    Measured over the steps between two log points, with validation (and what runs after it)
    left out, so it is the speed of the training step itself; `overall` covers the whole run.
    It reads only the wall clock: no device syncs.
    """

    def __init__(self) -> None:
        self.last: float | None = None  # end of the previous training step; None after a pause
        self.window_seconds, self.window_tokens = 0.0, 0
        self.total_seconds, self.total_tokens = 0.0, 0

    @property
    def overall(self) -> float | None:
        return self.total_tokens / self.total_seconds if self.total_seconds > 0 else None

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        if self.last is None:  # the first step, or the first after a validation
            self.last = time.perf_counter()

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.last = None  # validation and whatever runs after it (samples, figures) is not training

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        now = time.perf_counter()
        tokens = batch[0].numel() * trainer.world_size
        if self.last is not None:
            self.window_seconds += now - self.last
            self.window_tokens += tokens
            self.total_seconds += now - self.last
            self.total_tokens += tokens
        self.last = now
        if is_logging_step(trainer) and self.window_seconds > 0:
            pl_module.log("train/tokens_per_sec", self.window_tokens / self.window_seconds, prog_bar=True)
            self.window_seconds, self.window_tokens = 0.0, 0


class ProgressBar(TQDMProgressBar):
    """Lightning's bar showing just the loss and tokens/s (no version number)."""

    SHORT_NAMES = {"train/loss": "loss", "train/tokens_per_sec": "tokens/s"}

    def get_metrics(self, trainer: L.Trainer, pl_module: L.LightningModule) -> dict[str, Any]:
        metrics = super().get_metrics(trainer, pl_module)
        shown = {short: metrics[name] for name, short in self.SHORT_NAMES.items() if name in metrics}
        if "tokens/s" in shown:
            shown["tokens/s"] = f"{float(shown['tokens/s']):,.0f}"
        return shown


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


class TrainingInterrupted(Exception):
    """Raised right after the interrupt checkpoint is written, so nothing runs or saves after it."""

    def __init__(self, signal_name: str, step: int, saved_to: Path):
        super().__init__(f"{signal_name} at step {step}: saved {saved_to}")
        self.signal_name, self.step, self.saved_to = signal_name, step, saved_to


class GracefulInterrupt(L.Callback):
    """Ctrl-C (SIGINT) or SIGTERM: finish the step in flight, save last.ckpt, stop.

    The checkpoint holds everything a resume needs (weights, optimizer, schedule, step, data
    position, RNG), so `python -m src.train ckpt_path=<run dir>` carries on as if nothing
    happened. A second signal stops at once; the atomic checkpoint writes keep the files whole.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.received: str | None = None
        self.previous: dict[int, Any] = {}

    def _handle(self, signum: int, frame: Any) -> None:
        if self.received is not None:  # asked twice: stop now
            self._restore()
            raise KeyboardInterrupt
        self.received = signal.Signals(signum).name

    def _restore(self) -> None:
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)
        self.previous = {}

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if threading.current_thread() is threading.main_thread():
            self.previous = {s: signal.signal(s, self._handle) for s in self.SIGNALS}

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        # Every rank must stop at the same step, whichever of them got the signal.
        if not trainer.strategy.reduce_boolean_decision(self.received is not None, all=False):
            return
        checkpointing = trainer.checkpoint_callback
        directory = getattr(checkpointing, "dirpath", None) or Path(trainer.default_root_dir) / "checkpoints"
        saved_to = Path(directory) / "last.ckpt"
        trainer.save_checkpoint(saved_to, weights_only=False)  # a full, resumable state
        # Lightning writes this step's metrics right after this hook, which the raise below
        # skips: write them now so the curve has no hole where the run was interrupted.
        trainer._logger_connector.update_train_step_metrics()
        # Stop here: letting the loop wind down would validate and re-save last.ckpt with a
        # different loop state, and the resumed run would no longer replay the same steps.
        raise TrainingInterrupted(self.received or "SIGTERM", trainer.global_step, saved_to)

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self._restore()
