"""Callbacks of a training run: throughput and MFU, the progress bar, a line per validation, last.ckpt and
its atomic writes, signals."""

from __future__ import annotations

import errno
import io
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.fabric.plugins.environments import SLURMEnvironment
from lightning.pytorch.callbacks import Checkpoint, ModelCheckpoint, TQDMProgressBar
from lightning.pytorch.plugins.io import TorchCheckpointIO

from src.data.corpus import fsync
from src.rules import finite, positive_int
from src.training import STOP_SIGNALS
from src.training.flops import training_flops_per_token

log = logging.getLogger(__name__)


def is_logging_step(trainer: L.Trainer, taken: bool = False) -> bool:
    """Whether Lightning writes this optimizer step's metrics (every `log_every_n_steps`-th): the step in
    progress, whose global_step still counts the steps before it, or (taken) the step just taken, in
    on_train_batch_end. Logging on other steps would cost time and never be written."""
    return (trainer.global_step + (0 if taken else 1)) % trainer.log_every_n_steps == 0


def validates_step_zero(trainer: L.Trainer) -> bool:
    """Whether this is the run's validation at step 0: with `trainer.num_sanity_val_steps=-1` (the
    default here) Lightning's sanity check before a new run's first step is a whole validation, so the
    curves start at the untrained model's loss, as nanoGPT's do. A shorter sanity check is not reported."""
    return (
        trainer.sanity_checking
        and trainer.global_step == 0
        and trainer.state.fn == "fit"
        and trainer.num_sanity_val_steps == float("inf")
    )


def reported_validation(trainer: L.Trainer) -> bool:
    """Whether this validation is one of the run's: in fit, and not a sanity check but step 0's."""
    return trainer.state.fn == "fit" and (not trainer.sanity_checking or validates_step_zero(trainer))


# A CPU has no stable peak FLOP/s (a probe at start-up read impossible values on a shared machine:
# BENCHMARKS.md, "Sampling and MFU"), so on a CPU MFU is shown only with peak_flops set.


def compute_dtype(precision: str) -> torch.dtype:
    """The dtype matmuls run in under a Lightning precision setting ("32-true", "bf16-mixed", ...)."""
    dtypes = {"bf16": torch.bfloat16, "16": torch.float16, "64": torch.float64}
    return next((dtype for start, dtype in dtypes.items() if str(precision).startswith(start)), torch.float32)


def peak_flops(device: torch.device, precision: str, configured: float | None = None) -> tuple[float | None, str]:
    """(peak FLOP/s of one device, where the number comes from); (None, why) when it is unknown."""
    if configured is not None:
        return float(configured), "configured"
    if device.type == "cpu":
        return None, "no stable peak on a CPU: set callbacks.throughput.peak_flops=<FLOP/s> to show MFU"
    from lightning.fabric.utilities.throughput import get_available_flops

    flops = get_available_flops(device, compute_dtype(precision))
    if flops is None:
        return None, f"unknown for this {device.type} device: set callbacks.throughput.peak_flops"
    return float(flops), "datasheet"


class Throughput(L.Callback):
    """Logs `train/tokens_per_sec`: training tokens (all ranks) per second of training time, the one
    definition of a run's tokens/s (the progress bar, TensorBoard, the validation line, and `overall` in
    result.json), and `train/flops_per_sec` (per device) and `train/mfu` (a fraction of the device's
    peak, never shown above 100 %). Validation and what runs after it are not training time. The clock is
    read at log points only: per step the callback compares two integers. `peak_flops` (FLOP/s of one
    device) overrides Lightning's table, and is what a CPU needs for MFU. Not Lightning's
    ThroughputMonitor: it syncs a GPU at every step, logs beside the progress bar, and knows no CPU peak."""

    def __init__(self, peak_flops: float | None = None) -> None:
        if peak_flops is not None:
            finite("peak_flops", peak_flops, 0.0, "a positive FLOP/s figure, or null", strict=True)
        self.configured = peak_flops
        self.peak: float | None = None
        self.per_token = 0  # training FLOPs per token of this model, counted once at train start
        self.window_start: float | None = None  # None while training is paused (before a step, after a validation)
        self.window_step = 0  # global_step when the window started
        self.tokens_per_step = 0  # tokens of one optimizer step over all ranks
        self.total_seconds, self.total_tokens = 0.0, 0

    @property
    def overall(self) -> float | None:
        return self.total_tokens / self.total_seconds if self.total_seconds > 0 else None

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        if self.window_start is None:  # the first step, or the first after a validation
            self.window_start, self.window_step = time.perf_counter(), trainer.global_step
            self.tokens_per_step = batch[0].numel() * trainer.world_size * trainer.accumulate_grad_batches

    def close_window(self, trainer: L.Trainer) -> float | None:
        """Add the steps since the window started to the totals; their tokens per second."""
        steps = trainer.global_step - self.window_step
        if self.window_start is None or steps <= 0:
            return None
        now = time.perf_counter()
        seconds = now - self.window_start
        self.total_seconds += seconds
        self.total_tokens += steps * self.tokens_per_step
        self.window_start, self.window_step = now, trainer.global_step
        return steps * self.tokens_per_step / seconds if seconds > 0 else None

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if is_logging_step(trainer, taken=True) and trainer.global_step != self.window_step:
            tokens_per_second = self.close_window(trainer)
            if tokens_per_second is not None:
                self.report(trainer, pl_module, tokens_per_second)

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not trainer.sanity_checking:
            self.close_window(trainer)
            self.window_start = None  # validation and whatever runs after it is not training

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.close_window(trainer)
        self.window_start = None

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.per_token = training_flops_per_token(pl_module.model, pl_module.model.context_window)
        self.peak, source = peak_flops(trainer.strategy.root_device, trainer.precision, self.configured)
        shown = f"{self.peak / 1e12:.3g} TFLOP/s ({source})" if self.peak is not None else source
        if trainer.is_global_zero and (self.peak is not None or trainer.strategy.root_device.type != "cpu"):
            log.info(f"MFU peak per device: {shown}")  # a CPU has none, and every CPU run saying so was noise

    def report(self, trainer: L.Trainer, pl_module: L.LightningModule, tokens_per_second: float) -> None:
        pl_module.log("train/tokens_per_sec", tokens_per_second, prog_bar=True)
        achieved = tokens_per_second / trainer.world_size * self.per_token
        pl_module.log("train/flops_per_sec", achieved)
        if self.peak is not None and achieved > self.peak:
            if trainer.is_global_zero:
                log.warning(
                    f"this device reached {achieved:.3g} FLOP/s, above its configured peak of {self.peak:.3g}: "
                    f"MFU is no longer shown; raise callbacks.throughput.peak_flops"
                )
            self.peak = None
        if self.peak is not None:
            pl_module.log("train/mfu", achieved / self.peak, prog_bar=True)


def progress_bar_shown(setting: Any) -> bool:
    """progress_bar=auto: a bar on an interactive terminal outside CI; true or false force it."""
    if str(setting).lower() == "auto":
        return sys.stderr.isatty() and not os.environ.get("CI")
    return str(setting).lower() == "true"


class ProgressBar(TQDMProgressBar):
    """Lightning's bar showing just the loss and tokens/s (no version number)."""

    SHORT_NAMES = {"train/loss": "loss", "train/tokens_per_sec": "tokens/s", "train/mfu": "mfu"}

    def get_metrics(self, trainer: L.Trainer, pl_module: L.LightningModule) -> dict[str, Any]:
        metrics = super().get_metrics(trainer, pl_module)
        shown = {short: metrics[name] for name, short in self.SHORT_NAMES.items() if name in metrics}
        if "tokens/s" in shown:
            shown["tokens/s"] = f"{float(shown['tokens/s']):,.0f}"
        if "mfu" in shown:
            shown["mfu"] = f"{100 * float(shown['mfu']):.1f}%"
        return shown

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        """A stop (Ctrl-C, an error) ends the bars' lines first: its message gets a line of its own."""
        for bar in ("train_progress_bar", "val_progress_bar"):
            try:
                getattr(self, bar).close()
            except TypeError:  # Lightning's word for a bar that was never opened
                pass


class ProgressLog(L.Callback):
    """Without a progress bar (output to a file, CI, nohup): a plain line every `every_seconds`,
    so a log shows the run moving long before its first validation."""

    def __init__(self, every_seconds: float = 30.0):
        finite("every_seconds", every_seconds, 0.0, "a number >= 0 (seconds between lines)")
        self.every_seconds = every_seconds
        self.started: float | None = None
        self.last, self.first_step = 0.0, 0

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.started = self.last = time.monotonic()
        self.first_step = trainer.global_step

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        now = time.monotonic()
        if now - self.last < self.every_seconds or not trainer.is_global_zero or self.started is None:
            return
        self.last = now
        step, total = trainer.global_step, trainer.max_steps
        line = f"step {step:>6}/{total}"
        if "train/loss" in trainer.callback_metrics:  # the last logged step's loss: no device sync here
            line += f" | train loss {float(trainer.callback_metrics['train/loss']):.4f}"
        done = step - self.first_step
        elapsed = now - self.started
        line += f" | {elapsed:.0f} s"
        if done > 0 and total > step:
            line += f", ~{elapsed / done * (total - step):.0f} s to go"
        log.info(line)


class ValidationReport(L.Callback):
    """Prints one line per validation, so logs read well with or without a progress bar."""

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if (trainer.sanity_checking and not validates_step_zero(trainer)) or not trainer.is_global_zero:
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
        log.info(line)  # the terminal (above the progress bar) and the run's train.log


def remove_leftovers(directory: Path) -> None:
    """Delete `*.partial-<pid>` files that a killed writer left behind (its process is gone)."""
    for partial in directory.glob("*.partial-*"):
        pid = partial.name.rsplit("-", 1)[1]
        if pid.isdigit() and int(pid) != os.getpid() and not Path(f"/proc/{pid}").exists():
            partial.unlink(missing_ok=True)


def atomic_torch_save(obj: Any, path: str | os.PathLike) -> None:
    """torch.save to a temp file beside `path`, fsync, then rename over it: readers see the old checkpoint
    or the new one, never half of either. A leftover `*.partial-<pid>` from a kill does not end in .ckpt,
    and the next save removes it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_leftovers(path.parent)
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    partial = path.with_name(f"{path.name}.partial-{os.getpid()}")
    try:
        try:
            with open(partial, "wb") as f:
                f.write(buffer.getbuffer())
                f.flush()
                os.fsync(f.fileno())
            os.replace(partial, path)
        except OSError as err:  # a full or read-only disk: say where, what it needs, and what is kept
            size = f"{buffer.getbuffer().nbytes / 1e6:,.1f} MB"
            if err.errno == errno.EFBIG:
                why = f"({size}): {too_large()}; {what_is_kept(path.parent)}"
            else:
                why = (
                    f"({err.strerror or err}; it needs {size} free there): {what_is_kept(path.parent)} once there "
                    f"is room, or choose another hydra.run.dir"
                )
            raise CheckpointWriteError(err.errno, f"cannot write the checkpoint {path} {why}") from None
    finally:
        partial.unlink(missing_ok=True)
    fsync(path.parent)  # the rename itself


def too_large() -> str:
    """A write refused with EFBIG ("File too large"): not a full disk but this process's file-size limit."""
    import resource

    limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    return (
        f"a file of the run reached this process's file-size limit ({limit / 1e6:,.1f} MB, ulimit -f), which free "
        f"space does not lift: raise it (ulimit -f unlimited)"
    )


class CheckpointWriteError(OSError):
    """A checkpoint that could not be written, its message naming the file, its size and what is kept."""

    def __str__(self) -> str:
        return str(self.strerror)  # the message alone, without OSError's "[Errno N]"


def what_is_kept(directory: Path) -> str:
    """The newest checkpoint in `directory` and how to resume from it, after a failed write."""
    kept = sorted(directory.glob("*.ckpt"), key=lambda p: p.stat().st_mtime)
    if not kept:
        return "no checkpoint was written before it: run again"
    return f"the newest checkpoint, {kept[-1]}, is intact: resume with python -m src.train ckpt_path={kept[-1]}"


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning's torch checkpoint IO, with atomic_torch_save for every write."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None) -> None:
        atomic_torch_save(checkpoint, path)


class LastCheckpoint(Checkpoint):
    """checkpoints/last.ckpt always holds the newest state: after every validation, every
    `every_n_train_steps` steps if set, and when training ends, whatever the val loss did (Lightning's
    ModelCheckpoint refreshes its last.ckpt only when it also saves a top-k file). A Checkpoint
    subclass, so Lightning runs it after the best-checkpoint callback, whose state it then saves."""

    def __init__(self, dirpath: str | Path, every_n_train_steps: int | None = None):
        if every_n_train_steps is not None:
            positive_int("every_n_train_steps", every_n_train_steps, "or null to save at validations only")
        self.dirpath = Path(dirpath)
        self.path = self.dirpath / "last.ckpt"
        self.every_n_train_steps = every_n_train_steps
        self.saved_step: int | None = None

    def save(self, trainer: L.Trainer) -> None:
        if trainer.fast_dev_run or trainer.sanity_checking or trainer.state.fn != "fit":
            return  # a smoke test (debug=fast_dev_run) writes no checkpoints, as Lightning's own do not
        if trainer.global_step != self.saved_step:
            trainer.save_checkpoint(self.path, weights_only=False)
            self.saved_step = trainer.global_step

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        # Not the last step: its last.ckpt is written after the final validation, with its result, so a
        # last.ckpt that holds every step also holds the run's final validation.
        every = self.every_n_train_steps
        if every and trainer.global_step % every == 0 and trainer.global_step < trainer.max_steps:
            self.save(trainer)

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.save(trainer)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.save(trainer)  # e.g. validation switched off with trainer.limit_val_batches=0


class BestCheckpoint(ModelCheckpoint):
    """Lightning's ModelCheckpoint (checkpoints/best.ckpt), whose state travels with the run's folder: Lightning
    reloads the best score only when the folder's path is unchanged, so a run copied or moved, then resumed,
    replaced best.ckpt at its first validation even when worse. Here the saved paths are moved along."""

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        old, new = state_dict.get("dirpath"), self.dirpath
        if old and new and old != new:

            def moved(path: str) -> str:
                return os.path.join(new, os.path.relpath(path, old)) if path else path

            state_dict = {
                **state_dict,
                "dirpath": new,
                "best_model_path": moved(state_dict["best_model_path"]),
                "kth_best_model_path": moved(state_dict.get("kth_best_model_path", "")),
                "last_model_path": moved(state_dict.get("last_model_path", "")),
                "best_k_models": {moved(path): score for path, score in state_dict.get("best_k_models", {}).items()},
            }
        super().load_state_dict(state_dict)


class TrainingInterrupted(Exception):
    """A signal stopped training; nothing runs or saves after it."""

    def __init__(self, signal_name: str, step: int, saved_to: Path | None, newest: str = ""):
        saved = f"saved {saved_to}" if saved_to else f"stopped at once without saving; {newest}"
        super().__init__(f"{signal_name} at step {step}: {saved}")
        self.signal_name, self.step, self.saved_to = signal_name, step, saved_to


# Set by the parallel launcher for its workers (src/sweeps/launcher.py): the pid of the sweep's main process.
PARENT_ENV = "SCRATCHGPT_SWEEP_PARENT"
PARENT_GONE = "the sweep's main process ended"


class GracefulInterrupt(L.Callback):
    """Ctrl-C (SIGINT), SIGTERM, SIGHUP (a closed terminal), SIGUSR1 (SLURM's pre-emption notice) or a
    parallel sweep's main process ending: finish the step in flight, save last.ckpt, stop, between two
    steps, where the checkpoint holds everything a resume needs. A second Ctrl-C stops at once; other
    signals sent again change nothing (programs repeat them). Under DDP the ranks agree at the next
    log step, whichever rank got it (docs/reliability.md)."""

    def __init__(self) -> None:
        self.received: str | None = None
        self.saved_to: Path | None = None
        self.previous: dict[int, Any] = {}
        self.trainer: L.Trainer | None = None
        parent = os.environ.get(PARENT_ENV, "")  # a parallel sweep's main process: its end (even kill -9) stops
        self.parent = int(parent) if parent.isdigit() else None

    def _handle(self, signum: int, frame: Any) -> None:
        name = signal.Signals(signum).name
        if self.received is None:
            self.received = name
            return
        if signum != signal.SIGINT:
            return  # repeated by a program: the save between two steps is already on its way
        self._restore()  # Ctrl-C twice: stop now, naming the newest checkpoint on disk, if any
        trainer = self.trainer
        step = trainer.global_step if trainer is not None else 0
        saved = trainer is not None and self.last_path(trainer).is_file()
        newest = "the newest checkpoint on disk is intact" if saved else "no checkpoint was written yet"
        raise TrainingInterrupted(f"second {name}", step, None, newest)

    def _restore(self) -> None:
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)
        self.previous = {}

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        # The handlers from before the run, taken before Lightning installs its own (after setup), given
        # back in teardown (after Lightning restores its own): after fit a signal meets the command's.
        if threading.current_thread() is threading.main_thread():
            self.previous = {s: signal.getsignal(s) for s in STOP_SIGNALS}
        # Under SLURM, Lightning's SIGUSR1 handler would write hpc_ckpt_N.ckpt mid-step and requeue the job,
        # which would restore it past the resume checks: pre-emption is this callback's (train() requeues).
        environment = getattr(trainer._accelerator_connector, "cluster_environment", None)
        if isinstance(environment, SLURMEnvironment):
            environment.auto_requeue = False

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.trainer = trainer
        if threading.current_thread() is threading.main_thread():
            for s in STOP_SIGNALS:
                signal.signal(s, self._handle)

    def last_path(self, trainer: L.Trainer) -> Path:
        paths = [c.path for c in trainer.callbacks if isinstance(c, LastCheckpoint)]
        return paths[0] if paths else Path(trainer.default_root_dir) / "checkpoints" / "last.ckpt"

    def signalled(self, trainer: L.Trainer) -> bool:
        if self.received is None and self.parent is not None and os.getppid() != self.parent:
            self.received = PARENT_GONE  # orphaned: nobody is left to collect this job's result
        # Every rank must stop at the same step, whichever of them got the signal.
        return trainer.strategy.reduce_boolean_decision(self.received is not None, all=False)

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        # Several ranks agree at log steps only (the check is an all-reduce, a host sync), where
        # every rank checks alike, so all stop at the same step; one process acts at once.
        if (
            self.saved_to is None
            and (trainer.world_size == 1 or is_logging_step(trainer, taken=True))
            and self.signalled(trainer)
        ):
            self.saved_to = self.last_path(trainer)
            trainer.save_checkpoint(self.saved_to, weights_only=False)  # a full, resumable state

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.saved_to is None and not trainer.sanity_checking and self.signalled(trainer):
            self.saved_to = self.last_path(trainer)  # LastCheckpoint writes it at the end of this validation

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        # Stop between two steps, once this step's metrics are written and its checkpoint saved.
        if self.saved_to is not None:
            raise TrainingInterrupted(self.received or "SIGTERM", trainer.global_step, self.saved_to)

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if self.received is None:
            self._restore()
        # else: stopping; until the process ends, a signal sent again still meets this handler.
