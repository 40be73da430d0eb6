"""LitGPT: the LightningModule around GPT or SeedGPT.

It owns the loss over all positions, the optimizer and per-step schedule, and the metrics.
Its hyperparameters hold the model config and the tokenizer, so a checkpoint alone is enough
to rebuild the model and sample from it.
"""

from __future__ import annotations

import math
from typing import Any

import lightning as L
import torch
from torch import Tensor
from torchmetrics import MeanMetric
from torchmetrics.classification import MulticlassAccuracy

from src.data.tokenizer import CharTokenizer
from src.data.windows import IGNORE
from src.model.factory import build_model
from src.model.layers import cross_entropy
from src.model.sampling import generate
from src.training.optim import build_optimizer, build_schedule


class LitGPT(L.LightningModule):
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

    def forward(self, idx: Tensor, targets: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
        return self.model(idx, targets)

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        x, y = batch  # (B, T) each
        _, loss = self.model(x, y)
        self.log("train/loss", loss, prog_bar=True)
        return loss

    def _eval_step(self, split: str, batch: tuple[Tensor, Tensor]) -> None:
        x, y = batch
        logits, _ = self.model(x)  # (B, T, vocab)
        scored = y != IGNORE
        losses = cross_entropy(logits[scored], y[scored], fused=True, reduction="none")
        self.eval_loss[split].update(losses)
        self.eval_acc[split].update(logits.flatten(0, 1), y.flatten())

    def _eval_epoch_end(self, split: str) -> dict[str, float]:
        loss = self.eval_loss[split].compute().item()  # averaged over every scored position, all ranks
        metrics = {
            f"{split}/loss": loss,
            f"{split}/ppl": math.exp(loss),
            f"{split}/bpc": loss / math.log(2),
            f"{split}/acc": self.eval_acc[split].compute().item(),
        }
        self.eval_loss[split].reset()
        self.eval_acc[split].reset()
        self.log_dict(metrics, logger=False)  # for the checkpoint monitor and the progress bar
        return metrics

    def _log_at_step(self, metrics: dict[str, float]) -> None:
        """To the logger at the number of optimizer steps taken (Lightning would use that minus one)."""
        if self.logger is not None and self.trainer.is_global_zero:
            self.logger.log_metrics(metrics, step=self.global_step)

    def validation_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        self._eval_step("val", batch)

    def on_validation_epoch_end(self) -> None:
        metrics = self._eval_epoch_end("val")
        if not self.trainer.sanity_checking and self.trainer.state.fn == "fit":
            self.best_val_loss = min(self.best_val_loss, metrics["val/loss"])
            self._log_at_step({**metrics, "hp_metric": self.best_val_loss})

    def test_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        self._eval_step("test", batch)

    def on_test_epoch_end(self) -> None:
        self._eval_epoch_end("test")

    def configure_optimizers(self) -> dict[str, Any]:
        cfg = dict(self.hparams.optimizer)
        if cfg.get("decay_steps") is None:
            cfg["decay_steps"] = self.trainer.max_steps
        optimizer = build_optimizer(self.model, cfg)
        schedule = build_schedule(optimizer, cfg)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self.trainer.global_step % max(1, self.trainer.log_every_n_steps) == 0:
            self.log("train/lr", self.trainer.optimizers[0].param_groups[0]["lr"])

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["best_val_loss"] = self.best_val_loss

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.best_val_loss = checkpoint.get("best_val_loss", math.inf)

    @torch.no_grad()
    def sample(
        self,
        prompt: str,
        max_new_tokens: int,
        temperature: float = 1.0,
        top_k: int | None = None,
        top_p: float | None = None,
        greedy: bool = False,
        seed: int | None = None,
    ) -> str:
        """The prompt continued by max_new_tokens characters, reproducible with `seed`."""
        prompt_ids = self.tokenizer.encode(prompt).to(self.device)
        generator = torch.Generator(self.device).manual_seed(seed) if seed is not None else None
        ids = generate(self.model, prompt_ids, max_new_tokens, temperature, top_k, top_p, greedy, generator=generator)
        return self.tokenizer.decode(ids)
