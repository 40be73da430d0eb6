"""FLOPs of a training step and MFU, the model FLOPs utilisation that nanoGPT prints.

A matmul of (m, k) by (k, n) costs 2mkn FLOPs. Per token, every entry of a weight matrix does
one multiply-add in the forward pass (2 FLOPs) and two in the backward pass (the gradients of
the input and of the weight, 4 FLOPs): 6N for the N weights that multiply activations. Each
attention layer of width d adds Q K^T and weights V over T keys: 2 * 2 * T * d per token
forward, 12 * T * d with the backward. Lookups (the embedding rows, learned positions), layer
norms, softmax and GELU are not matmuls and are left out, as in nanoGPT's estimate_mfu (after
the PaLM paper, appendix B):

    FLOPs per token (forward + backward) = 6 N + 12 * sum over attention layers of d * T
    MFU = FLOPs per token * tokens per second / the device's peak FLOP/s

The peak comes from `peak_flops` when given, else from Lightning's datasheet table for common
GPUs. A CPU has no such figure (what its BLAS reaches depends on the clock, the free cores and
the load, and a probe at start-up read impossible values on a shared machine: BENCHMARKS.md,
"Sampling and MFU"), so on a CPU MFU is shown only with `peak_flops` set; FLOP/s are shown either way.
"""

from __future__ import annotations

import logging

import lightning as L
import torch
from torch import nn

from src.model.attention import MultiHeadAttention, SingleHeadSelfAttention
from src.model.layers import TokenAndPositionEmbedding
from src.rules import finite
from src.training.callbacks import TokensPerSecond

log = logging.getLogger(__name__)


def matmul_weights(model: nn.Module) -> int:
    """N: the entries of the weight matrices that multiply activations, the W_... of the notes.

    Embedding tables are looked up, not multiplied, so they are left out, except the token
    table E when it is also the LM head (tied weights: logits = H E^T). Biases and layer-norm
    gains are added, not multiplied. So N is not the parameter count (src/model's parameters_of,
    which sizes memory and disk): it leaves out the lookup tables, biases and gains, and keeps
    E only for its use as the head. Both are counted off a built model, neither by a formula.
    """
    n = sum(p.numel() for name, p in model.named_parameters() if name.rsplit(".", 1)[-1].startswith("W_"))
    if getattr(model.cfg, "tie_weights", False):
        n += sum(m.E.numel() for m in model.modules() if isinstance(m, TokenAndPositionEmbedding))
    return n


def attention_width(model: nn.Module) -> int:
    """The sum over attention layers of the width of Q, K and V (L * d for a GPT)."""
    return sum(m.W_Q.shape[1] for m in model.modules() if isinstance(m, (MultiHeadAttention, SingleHeadSelfAttention)))


def training_flops_per_token(model: nn.Module, T: int) -> int:
    """Forward + backward FLOPs per token of a (B, T) training batch: 6N + 12 * L * d * T."""
    return 6 * matmul_weights(model) + 12 * attention_width(model) * T


def compute_dtype(precision: str) -> torch.dtype:
    """The dtype matmuls run in under a Lightning precision setting ("32-true", "bf16-mixed", ...)."""
    precision = str(precision)
    if precision.startswith("bf16"):
        return torch.bfloat16
    if precision.startswith("16"):
        return torch.float16
    if precision.startswith("64"):
        return torch.float64
    return torch.float32


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


class Throughput(TokensPerSecond):
    """TokensPerSecond, plus `train/flops_per_sec` (per device) and `train/mfu` (a fraction of the
    device's peak) over the same steps: FLOPs per token times tokens per second, no device syncs.
    `peak_flops` (FLOP/s of one device) overrides Lightning's table, and is what a CPU needs for
    MFU. MFU is never shown above 100 %: a configured peak below what the device reached is
    reported once and MFU is left out from then on.

    Lightning's ThroughputMonitor is not used: it updates its window at every step (and on a
    GPU synchronizes the device there), logs beside the progress bar rather than on it, and
    knows no peak for a CPU.
    """

    def __init__(self, peak_flops: float | None = None) -> None:
        if peak_flops is not None:
            finite("peak_flops", peak_flops, 0.0, "a positive FLOP/s figure, or null", strict=True)
        super().__init__()
        self.configured = peak_flops
        self.peak: float | None = None
        self.per_token = 0  # training FLOPs per token of this model, counted once at train start

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.per_token = training_flops_per_token(pl_module.model, pl_module.model.context_window)
        self.peak, source = peak_flops(trainer.strategy.root_device, trainer.precision, self.configured)
        if trainer.is_global_zero:
            shown = f"{self.peak / 1e12:.3g} TFLOP/s ({source})" if self.peak is not None else source
            log.info(f"MFU peak per device: {shown}")

    def report(self, trainer: L.Trainer, pl_module: L.LightningModule, tokens_per_second: float) -> None:
        super().report(trainer, pl_module, tokens_per_second)
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
