"""GPTModule: the LightningModule around GPT or SeedGPT: the loss, the optimizer and its schedule, the
metrics. Its hyperparameters hold the model config and the tokenizer, so a checkpoint alone rebuilds it."""

from __future__ import annotations

import functools
import logging
import math
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import lightning as L
import torch
from torch import Tensor
from torchmetrics import MeanMetric
from torchmetrics.classification import MulticlassAccuracy

from src.data.tokenizer import CharTokenizer
from src.data.windows import IGNORE
from src.model import build_model
from src.model.language_model import CausalLanguageModel
from src.model.layers import cross_entropy
from src.training.callbacks import is_logging_step, validates_step_zero
from src.training.optim import apply_settings, build_optimizer, build_schedule, hidden_lr_scale

log = logging.getLogger(__name__)


def log_at_step(trainer: L.Trainer, metrics: dict[str, float]) -> None:
    """Write metrics to the loggers at the number of optimizer steps taken, as the printed lines say.
    Lightning writes the training metrics of step k at k - 1 (Lightning 2.6.6; tests/run/test_faults.py
    reads the steps back), so a validation at step 250 is written here, at 250."""
    if trainer.is_global_zero:
        for logger in trainer.loggers:
            logger.log_metrics(metrics, step=trainer.global_step)


def score(model: CausalLanguageModel, x: Tensor, y: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """x, y: (B, T) -> (the losses of the scored positions, predicted tokens (B*T,), targets (B*T,))."""
    logits, _ = model(x)  # (B, T, vocab)
    scored = y != IGNORE  # the padding of the split's last window is not scored
    losses = cross_entropy(logits[scored], y[scored], fused=True, reduction="none")
    return losses, logits.argmax(-1).flatten(), y.flatten()


# Validation on a CPU scores its windows in parts, one single-threaded forward pass per core: at these
# sizes one pass's intra-op threads spend much of their time handing work to each other
# (BENCHMARKS.md, "Validation"). Each part holds at least this many tokens: smaller parts would spend
# more time in Python's dispatch (under the GIL) than in their maths.
MIN_PART_TOKENS = 512


def parts_and_threads(x: Tensor) -> tuple[int, int]:
    """How many parts to score x's windows in, at once, and torch threads for each; 1 part: one pass."""
    threads = torch.get_num_threads()
    # Autocast is not copied to worker threads: an autocast run scores in the calling thread.
    if x.device.type != "cpu" or torch.is_autocast_enabled("cpu"):
        return 1, threads
    parts = max(1, min(threads, len(x), x.numel() // MIN_PART_TOKENS))
    return parts, threads // parts


@functools.cache
def _workers(parts: int, threads: int) -> ThreadPoolExecutor:
    return ThreadPoolExecutor(parts, thread_name_prefix="score", initializer=torch.set_num_threads, initargs=(threads,))


def score_on_every_core(model: CausalLanguageModel, x: Tensor, y: Tensor) -> list[tuple[Tensor, Tensor, Tensor]]:
    """score() of x's windows in parts_and_threads(x) parts, run at once; the parts in order, so the
    metrics accumulate in the same order every run."""
    parts, threads = parts_and_threads(x)
    if parts == 1:
        return [score(model, x, y)]
    inference, grad = torch.is_inference_mode_enabled(), torch.is_grad_enabled()  # thread-local: pass them on

    def score_part(part: tuple[Tensor, Tensor]) -> tuple[Tensor, Tensor, Tensor]:
        with torch.inference_mode(inference), torch.set_grad_enabled(grad):
            return score(model, *part)

    pieces = zip(x.tensor_split(parts), y.tensor_split(parts), strict=True)
    return list(_workers(parts, threads).map(score_part, pieces))


NEVER = 2**62  # first_nonfinite_step before any loss was NaN or infinite


class NonFiniteLossError(ValueError):
    """Training diverged; the message names the step and what to change."""


class GPTModule(L.LightningModule):
    def __init__(
        self,
        model: dict[str, Any],
        tokenizer: dict[str, Any],
        optimizer: dict[str, Any],
        data: dict[str, Any] | None = None,
    ):
        """`data` records the text and its split, so evaluation later scores the same windows."""
        super().__init__()
        self.save_hyperparameters(logger=False)  # what is logged to TensorBoard is chosen in train.py
        self.tokenizer = CharTokenizer.from_dict(tokenizer)
        self.model = build_model(model, self.tokenizer.vocab_size)
        vocab = self.tokenizer.vocab_size
        self.eval_loss = torch.nn.ModuleDict({s: MeanMetric() for s in ("val", "test")})
        self.eval_acc = torch.nn.ModuleDict(
            {s: MulticlassAccuracy(num_classes=vocab, average="micro", ignore_index=IGNORE) for s in ("val", "test")}
        )
        self.best_val_loss = math.inf
        self.best_val_step: int | None = None  # the step of the last new best val/loss seen in this process
        self._parameter_list: list[torch.nn.Parameter] | None = None  # what clipping sees, listed once
        self.trained_steps = 0  # set by from_checkpoint: the optimizer steps behind these weights
        self.val_curve: list[tuple[int, float]] = []  # (step, val loss) of each reported validation: result.json
        # The first step whose loss was NaN or infinite (NEVER: none yet), on the device: no host sync. Not
        # a buffer: DDP re-broadcasts buffers from rank 0 before every forward, erasing what another saw.
        self._first_nonfinite_step: Tensor | None = None

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        x, y = batch  # (B, T) each
        _, loss = self.model(x, y)
        first = self.first_nonfinite_step(loss.device)
        bad = ~torch.isfinite(loss.detach()) & (first == NEVER)
        self._first_nonfinite_step = torch.where(bad, self.global_step, first)
        if is_logging_step(self.trainer):
            self.log("train/loss", loss, prog_bar=True)
            self.log("train/lr", self.trainer.optimizers[0].param_groups[0]["lr"])  # the rate of this step
        elif self.global_step == 0:  # the untrained model's loss, beside the validation at step 0
            log_at_step(self.trainer, {"train/loss": loss.item()})
        return loss

    def first_nonfinite_step(self, device: torch.device | None = None) -> Tensor:
        if self._first_nonfinite_step is None:
            self._first_nonfinite_step = torch.tensor(NEVER, device=device or self.device)
        return self._first_nonfinite_step

    def check_finite(self) -> None:
        """Stop with the step at which the loss went NaN/inf on any rank (all agree: the earliest), before
        anything is saved."""
        step = int(self.trainer.strategy.reduce(self.first_nonfinite_step().clone(), reduce_op="min"))
        if step != NEVER:
            kept = (
                "so the checkpoints on disk are the last good ones"
                if self.saved_checkpoints()
                else "and no checkpoint was written before it"
            )
            raise NonFiniteLossError(
                f"the training loss became NaN or infinite at step {step}: stopped without saving, {kept}; "
                f"lower optimizer.lr or keep trainer.gradient_clip_val"
            )

    def saved_checkpoints(self) -> list[Path]:
        """The checkpoint files of this run's checkpoint callbacks (ModelCheckpoint, LastCheckpoint) on disk."""
        folders = {Path(c.dirpath) for c in self.trainer.checkpoint_callbacks if getattr(c, "dirpath", None)}
        return [file for folder in folders for file in folder.glob("*.ckpt")]

    def _eval_step(self, split: str, batch: tuple[Tensor, Tensor]) -> None:
        x, y = batch  # (B, T) each
        for losses, predicted, targets in score_on_every_core(self.model, x, y):
            self.eval_loss[split].update(losses)
            self.eval_acc[split].update(predicted, targets)

    def _eval_epoch_end(self, split: str) -> dict[str, float]:
        loss = self.eval_loss[split].compute().item()  # averaged over every scored position, all ranks
        metrics = {
            f"{split}/loss": loss,
            f"{split}/ppl": math.exp(loss) if loss < 700 else math.inf,  # exp overflows a float past ~709
            f"{split}/bpc": loss / math.log(2),
            f"{split}/acc": self.eval_acc[split].compute().item(),
        }
        self.eval_loss[split].reset()
        self.eval_acc[split].reset()
        # For the checkpoint monitor and the progress bar; torchmetrics has reduced them over the ranks already.
        self.log_dict(metrics, logger=False, sync_dist=True)
        return metrics

    def validation_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        self._eval_step("val", batch)

    def on_validation_epoch_end(self) -> None:
        metrics = self._eval_epoch_end("val")
        if self.trainer.state.fn != "fit":
            return
        if not self.trainer.sanity_checking:
            if metrics["val/loss"] < self.best_val_loss:
                self.best_val_loss, self.best_val_step = metrics["val/loss"], self.global_step
            log_at_step(self.trainer, {**metrics, "best_val_loss": self.best_val_loss})
        elif validates_step_zero(self.trainer):
            log_at_step(self.trainer, metrics)  # the untrained model: where both loss curves start
        else:
            return
        self.val_curve.append((self.global_step, metrics["val/loss"]))

    def test_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        self._eval_step("test", batch)

    def on_test_epoch_end(self) -> None:
        self._eval_epoch_end("test")

    def optimizer_config(self) -> dict[str, Any]:
        cfg = dict(self.hparams.optimizer)
        if cfg.get("decay_steps") is None:
            cfg["decay_steps"] = self.trainer.max_steps
        cfg["hidden_lr_scale"] = hidden_lr_scale(vars(self.model.cfg))  # model.scale's width rule
        return cfg

    def configure_optimizers(self) -> dict[str, Any]:
        cfg = self.optimizer_config()
        optimizer = build_optimizer(self.model, cfg)
        schedule = build_schedule(optimizer, cfg)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}

    def configure_gradient_clipping(
        self,
        optimizer: torch.optim.Optimizer,
        gradient_clip_val: float | None = None,
        gradient_clip_algorithm: str | None = None,
    ) -> None:
        """Clip as configured, and log the gradient norm at log steps (clipping computes it anyway)."""
        log_now = is_logging_step(self.trainer)
        # Listed once: walking the module tree at every step shows when a step takes milliseconds. The
        # order stays the module's: the norm's float sum depends on it.
        if self._parameter_list is None:
            self._parameter_list = list(self.parameters())
        params = self._parameter_list
        if gradient_clip_val and gradient_clip_algorithm in (None, "norm"):
            norm = torch.nn.utils.clip_grad_norm_(params, gradient_clip_val)
        else:
            self.clip_gradients(optimizer, gradient_clip_val, gradient_clip_algorithm)
            norm = torch.nn.utils.get_total_norm([p.grad for p in params if p.grad is not None]) if log_now else None
        if log_now:
            self.log("train/grad_norm", norm)

    def on_train_start(self) -> None:
        """The optimizer settings of the config win over those a resumed checkpoint restored."""
        cfg = self.optimizer_config()
        apply_settings(self.optimizers(use_pl_optimizer=False), self.lr_schedulers(), cfg)
        if self.global_step > 0 and self.trainer.is_global_zero:
            log.info(
                f"resuming at step {self.global_step}: the learning rate now follows warmup + cosine to step "
                f"{cfg['decay_steps']} (optimizer.decay_steps; null = trainer.max_steps), now "
                f"{self.trainer.optimizers[0].param_groups[0]['lr']:.3g}"
            )

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        if is_logging_step(self.trainer, taken=True):
            self.check_finite()
        if self.global_step >= self.trainer.max_steps:
            # Asked to stop, Lightning validates this step: every run ends with a validation and last.ckpt.
            self.trainer.should_stop = True

    def on_validation_start(self) -> None:
        if self.trainer.state.fn == "fit":
            self.check_finite()

    def setup(self, stage: str) -> None:
        """DDP ranks draw their own dropout masks (as nanoGPT seeds rank r with seed + r): the weights
        are built, identically on every rank, before this; rank 0 keeps the seed's own stream."""
        if stage == "fit" and self.trainer.global_rank > 0:
            torch.manual_seed(torch.initial_seed() + self.trainer.global_rank)

    def rng_state(self) -> dict[str, Tensor]:
        """The generators dropout draws from in this process: the CPU's, and the training device's."""
        device = self.trainer.strategy.root_device
        state = {"torch": torch.get_rng_state()}
        if device.type == "cuda":
            state["cuda"] = torch.cuda.get_rng_state(device)
        elif device.type == "mps":
            state["mps"] = torch.mps.get_rng_state()
        return state

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.check_finite()  # never replace a good checkpoint with a diverged state
        checkpoint["best_val_loss"] = self.best_val_loss
        checkpoint["val_curve"] = self.val_curve
        # Dropout's generators: a resumed run continues their streams, each rank its own (rank 0 writes).
        checkpoint["rng"] = self.rng_state()
        if self.trainer.world_size > 1:
            device = self.trainer.strategy.root_device
            gathered = {k: self.trainer.strategy.all_gather(v.to(device)).cpu() for k, v in checkpoint["rng"].items()}
            checkpoint["rng_ranks"] = [
                {k: v[r].clone() for k, v in gathered.items()} for r in range(self.trainer.world_size)
            ]

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Restore the random streams the run was saved with, as far as this machine allows, and say
        what could not be (another number of processes, another kind or count of device)."""
        self.best_val_loss = checkpoint.get("best_val_loss", math.inf)
        self.val_curve = [(step, loss) for step, loss in checkpoint.get("val_curve", [])]
        rng, lost = checkpoint.get("rng", {}), []
        world, rank = self.trainer.world_size, self.trainer.global_rank
        ranks = checkpoint.get("rng_ranks") or [rng]
        if len(ranks) == world:
            rng = ranks[rank]
        elif world > 1 or len(ranks) > 1:
            lost.append(f"each process's own random stream (saved by {len(ranks)} process(es), resumed by {world})")
        if "torch" in rng:
            torch.set_rng_state(rng["torch"])
        if rank > 0 and len(ranks) != world:
            torch.manual_seed(torch.initial_seed() + rank)  # at least the ranks' dropout stays apart
        device = self.trainer.strategy.root_device
        saved = rng.get(device.type)
        if device.type == "cuda" and isinstance(saved, (list, tuple)):  # every visible GPU's (before 2026-11-23)
            saved = saved[device.index or 0] if (device.index or 0) < len(saved) else None
        if device.type == "cuda" and saved is not None:
            torch.cuda.set_rng_state(saved, device)
        elif device.type == "mps" and saved is not None:
            torch.mps.set_rng_state(saved)
        elif device.type != "cpu":
            kinds = sorted(k for k in rng if k != "torch") or ["cpu"]
            lost.append(f"the {device} random stream (the run was saved on {', '.join(kinds)})")
        if lost and self.trainer.is_global_zero:
            log.warning(f"resuming without {' and '.join(lost)}: dropout draws new random numbers from here")

    @classmethod
    def from_checkpoint(cls, path: str | Path) -> GPTModule:
        """Rebuild from a checkpoint alone (load_trained's errors name the fix), with its settings."""
        from src.training.checkpoint import load_trained  # not loaded by a run that trains from scratch

        trained = load_trained(path)
        hparams = trained.hparams
        lit = cls(**{k: hparams[k] for k in ("model", "tokenizer", "optimizer", "data") if k in hparams})
        lit.model = trained.model  # in place of the freshly initialised one
        lit.trained_steps = trained.global_step
        lit.best_val_loss = trained.best_val_loss if trained.best_val_loss is not None else math.inf
        return lit.eval()
