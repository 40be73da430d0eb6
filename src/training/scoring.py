"""Scoring evaluation windows, on every CPU core at once.

Validation scores every position of the val split, so on a CPU it is a long run of forward passes
over independent windows. At this project's sizes (a batch's activations are a few thousand rows of
a few hundred columns) the intra-op threads of one forward pass spend much of their time handing
each matmul and GELU to each other; splitting the batch in one part per core (of at least
MIN_PART_TOKENS tokens), each scored by its own single-threaded forward pass, took less time
on 2 cores in the benchmark, with a smaller gain inside a training run (BENCHMARKS.md,
"Validation"). Windows are independent, so each position's loss is computed by the same maths
either way, and the parts are returned in order, so the metrics accumulate in the same order every run.
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


# Each part holds at least this many tokens. On many cores, parts of a few windows would spend
# more time in Python's per-operation dispatch (one thread at a time, under the GIL) than in
# their maths, so cores beyond one per MIN_PART_TOKENS go to each part's own intra-op threads.
MIN_PART_TOKENS = 512


def parts_and_threads(x: Tensor) -> tuple[int, int]:
    """How many parts to score x's windows in, at once, and torch threads for each; 1 part: one pass."""
    threads = torch.get_num_threads()
    # Grad mode and inference mode are copied to the workers below; autocast is not, so an
    # autocast run (trainer.precision=bf16-mixed) scores in the calling thread, as configured.
    if x.device.type != "cpu" or torch.is_autocast_enabled("cpu"):
        return 1, threads
    parts = max(1, min(threads, len(x), x.numel() // MIN_PART_TOKENS))
    return parts, threads // parts


@functools.cache
def _workers(parts: int, threads: int) -> ThreadPoolExecutor:
    """One thread per part, each running its forward passes on `threads` intra-op threads."""
    return ThreadPoolExecutor(parts, thread_name_prefix="score", initializer=torch.set_num_threads, initargs=(threads,))


def score_on_every_core(model: CausalLanguageModel, x: Tensor, y: Tensor) -> list[tuple[Tensor, Tensor, Tensor]]:
    """score() of x's windows in parts_and_threads(x) parts, run at once; the parts in order."""
    parts, threads = parts_and_threads(x)
    if parts == 1:
        return [score(model, x, y)]
    inference, grad = torch.is_inference_mode_enabled(), torch.is_grad_enabled()  # thread-local: pass them on

    def score_part(part: tuple[Tensor, Tensor]) -> tuple[Tensor, Tensor, Tensor]:
        with torch.inference_mode(inference), torch.set_grad_enabled(grad):
            return score(model, *part)

    pieces = zip(x.tensor_split(parts), y.tensor_split(parts), strict=True)
    return list(_workers(parts, threads).map(score_part, pieces))
