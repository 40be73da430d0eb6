"""`python -m benchmarks.train_speed --only step --nanogpt <checkout>`: the model's training step
alone, in this process: ours eager and with `compile=true`, nanoGPT's model eager, at the baby
and the notes' size.

A step is what both training loops do per batch, without either loop around it: forward,
cross-entropy, backward, gradient clipping at 1.0, fused AdamW, zero_grad, on one fixed batch of
12 windows. Ours and nanoGPT's eager steps alternate in ten turns, so both see the same
machine. Compiling is timed as the first compiled step (inductor's on-disk cache makes a second
process's first step much shorter: run the section twice to see both).
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

from src.model import build_model

SIZES = {"baby": (4, 4, 128, 64), "notes": (1, 5, 60, 10)}  # layers, heads, dims, block
BATCH, VOCAB, WARMUP = 12, 65, 30


def _nanogpt_model(nanogpt: Path, layers: int, heads: int, dims: int, block: int) -> torch.nn.Module:
    sys.path.insert(0, str(nanogpt))
    try:
        from model import GPT, GPTConfig  # nanoGPT's model.py, from the checkout given
    finally:
        sys.path.remove(str(nanogpt))
    config = GPTConfig(block_size=block, vocab_size=VOCAB, n_layer=layers, n_head=heads, n_embd=dims, dropout=0.0)
    return GPT(config)


class Steps:
    """A model's training steps on one fixed batch, taken a few at a time, so that models alternate.

    AdamW unless an optimizer is given; `bf16` runs forward and loss under bfloat16 autocast, as
    `trainer.precision=bf16-mixed` does (benchmarks/ablation.py times every switch with it)."""

    def __init__(
        self, model: torch.nn.Module, block: int, optimizer: Any = None, batch: int = BATCH, bf16: bool = False
    ):
        torch.manual_seed(0)
        self.model, self.bf16 = model, bf16
        self.optimizer = optimizer or torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
        self.x, self.y = torch.randint(0, VOCAB, (batch, block)), torch.randint(0, VOCAB, (batch, block))
        self.seconds: list[float] = []

    def take(self, steps: int) -> None:
        for _ in range(steps):
            start = time.perf_counter()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.bf16):
                _, loss = self.model(self.x, self.y)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
            self.seconds.append(time.perf_counter() - start)

    def result(self) -> dict[str, float]:
        return {"first_step_s": self.seconds[0], "median_ms": statistics.median(self.seconds[WARMUP:]) * 1000}


def _alternating(steppers: list[Steps], steps: int, blocks: int = 10) -> None:
    """`steps` steps of each, in `blocks` turns whose order flips every turn: machine noise hits both."""
    for turn in range(blocks):
        for stepper in steppers if turn % 2 == 0 else steppers[::-1]:
            stepper.take(steps // blocks)


def run(args: Any) -> dict[str, Any]:
    results = {}
    for name, (layers, heads, dims, block) in SIZES.items():
        options = dict(num_layers=layers, num_heads=heads, embedding_dim=dims, context_window=block)
        ours = Steps(build_model(dict(kind="gpt", positional="learned", fused=True, **options), VOCAB), block)
        eager = [ours]
        if args.nanogpt:
            theirs = Steps(_nanogpt_model(args.nanogpt, layers, heads, dims, block), block)
            eager.append(theirs)
        _alternating(eager, args.steps)
        row = {"ours_eager": ours.result()}
        if args.nanogpt:
            row["nanogpt_eager"] = theirs.result()
        compiled = build_model(dict(kind="gpt", positional="learned", fused=True, **options), VOCAB)
        compiled.compile()  # what compile=true does: the training forward only
        compiled_steps = Steps(compiled, block)
        compiled_steps.take(args.steps)
        row["ours_compiled"] = compiled_steps.result()
        results[name] = row
    return results


def table_rows(results: dict[str, Any]) -> list[str]:
    rows = []
    for name, row in results.items():
        nano = row.get("nanogpt_eager", {}).get("median_ms")
        for variant in ("ours_eager", "ours_compiled"):
            r = row[variant]
            ratio = f"{nano / r['median_ms']:.2f}x nanoGPT's eager" if nano else ""
            rows.append(
                f"| model step alone, {name}, {variant.replace('_', ' ')}: median ms (first step s)"
                f" | {r['median_ms']:.2f} ({r['first_step_s']:.1f}) | {f'{nano:.2f}' if nano else 'n/a'} | {ratio} |"
            )
    return rows
