"""Scoring evaluation windows, on every CPU core at once.

Validation scores every position of the val split, so on a CPU it is a long run of forward passes
over independent windows. At this project's sizes (a batch's activations are a few thousand rows of
a few hundred columns) the intra-op threads of one forward pass spend much of their time handing each
matmul and GELU to each other; splitting the batch in one part per core, each scored by its own
single-threaded forward pass, took ~30 % less time on 2 cores in the benchmark, less inside a
training run (BENCHMARKS.md, "Validation on every core"). Windows are independent, so each
position's loss is computed by the same maths either way, and the parts are returned in order, so
the metrics accumulate in the same order on every run.
"""

from __future__ import annotations

import functools
from concurrent.futures import ThreadPoolExecutor

import torch
from torch import Tensor

from src.data.windows import IGNORE
from src.model.language_model import CausalLanguageModel
from src.model.layers import cross_entropy


def score(model: CausalLanguageModel, x: Tensor, y: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """x, y: (B, T) -> (the losses of the scored positions, predicted tokens (B*T,), targets (B*T,))."""
    logits, _ = model(x)  # (B, T, vocab)
    scored = y != IGNORE  # the padding of the split's last window is not scored
    losses = cross_entropy(logits[scored], y[scored], fused=True, reduction="none")
    return losses, logits.argmax(-1).flatten(), y.flatten()


@functools.cache
def _workers(cores: int) -> ThreadPoolExecutor:
    """One thread per core, each running its forward passes on one intra-op thread."""
    return ThreadPoolExecutor(cores, thread_name_prefix="score", initializer=torch.set_num_threads, initargs=(1,))


def _splits_across_cores(x: Tensor) -> bool:
    # Grad mode and inference mode are copied to the workers below; autocast is not, so an
    # autocast run (trainer.precision=bf16-mixed) scores in the calling thread, as configured.
    on_cpu = x.device.type == "cpu" and not torch.is_autocast_enabled("cpu")
    return on_cpu and torch.get_num_threads() > 1 and len(x) > 1


def score_on_every_core(model: CausalLanguageModel, x: Tensor, y: Tensor) -> list[tuple[Tensor, Tensor, Tensor]]:
    """score() of x's windows in one part per intra-op thread, run at once; the parts in order."""
    if not _splits_across_cores(x):
        return [score(model, x, y)]
    cores = min(torch.get_num_threads(), len(x))
    inference, grad = torch.is_inference_mode_enabled(), torch.is_grad_enabled()  # thread-local: pass them on

    def score_part(part: tuple[Tensor, Tensor]) -> tuple[Tensor, Tensor, Tensor]:
        with torch.inference_mode(inference), torch.set_grad_enabled(grad):
            return score(model, *part)

    return list(_workers(cores).map(score_part, zip(x.tensor_split(cores), y.tensor_split(cores), strict=True)))
