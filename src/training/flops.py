"""The compute of a training run, counted once: FLOPs per token, the three parameter counts, and a FLOP
budget turned into optimizer steps (`trainer.flops`).

FLOPs per token of a training step (forward + backward), as nanoGPT's estimate_mfu (after the PaLM paper,
appendix B):

    C_token = 6 N + 12 L d T

6 N for the N weights that multiply activations (2 forward, 4 backward: the gradients of the input and of
the weight), plus, per attention layer of width d over T keys, 2 d T for Q K^T and 2 d T for the weighted
V, forward, times 3 with the backward. Norms, softmax, GELU and the loss are left out (O(d) per token, not
O(d^2) or O(d T)). A budget C then trains D = C / C_token tokens.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from torch import nn

from src.model.attention import MultiHeadAttention, SingleHeadSelfAttention
from src.model.layers import TokenAndPositionEmbedding
from src.rules import ConfigError

HEADS = ("W_vocab", "W_out", "b_out")  # the output layer's own parameters (a tied head is E, an embedding)
EPOCHS_WORTH_DATA = 4  # past ~4 epochs repeated tokens stop being worth new ones (Muennighoff et al. 2025)


def matmul_weights(model: nn.Module) -> int:
    """N: the entries of the weight matrices that multiply activations, the W_... of the notes. Not a
    parameter count (parameter_counts): embedding tables are looked up, not multiplied (the token table
    E counts only as a tied LM head), and biases and gains are added."""
    n = sum(p.numel() for name, p in model.named_parameters() if name.rsplit(".", 1)[-1].startswith("W_"))
    if getattr(model.cfg, "tie_weights", False):
        n += sum(m.E.numel() for m in model.modules() if isinstance(m, TokenAndPositionEmbedding))
    return n


def training_flops_per_token(model: nn.Module, T: int) -> int:
    """Forward + backward FLOPs per token of a (B, T) training batch: 6 N + 12 L d T."""
    attention = (MultiHeadAttention, SingleHeadSelfAttention)
    width = sum(m.W_Q.shape[1] for m in model.modules() if isinstance(m, attention))  # L * d for a GPT
    return 6 * matmul_weights(model) + 12 * width * T


def parameter_counts(model: nn.Module) -> dict[str, int]:
    """The three counts scaling laws are fitted against (nanochat's dev/LOG.md, 2026-01-27, shows the
    exponent moves with the choice):

    all            every parameter
    non_embedding  all but the tables looked up by token or position (E, learned positions, E_V); a tied
                   LM head is E, so it goes with them (Kaplan et al. 2020's N)
    transformer    non_embedding without the output layer (W_vocab, or the seed's W_out and b_out) and the
                   final norm ln_f: the attention and MLP layers and the norms before them
    """
    tables = {id(p) for m in model.modules() if isinstance(m, TokenAndPositionEmbedding) for p in m.parameters()}
    counts = {"all": 0, "non_embedding": 0, "transformer": 0}
    for name, p in model.named_parameters():
        counts["all"] += p.numel()
        if id(p) in tables or name.endswith("E_V"):
            continue
        counts["non_embedding"] += p.numel()
        if name.rsplit(".", 1)[-1] not in HEADS and not name.startswith("ln_f."):
            counts["transformer"] += p.numel()
    return counts


@dataclass(frozen=True)
class Budget:
    """A FLOP budget as steps: `steps` optimizer steps of `tokens_per_step` tokens at `per_token` FLOPs each."""

    flops: float
    per_token: int
    tokens_per_step: int
    steps: int
    train_tokens: int  # the train split's tokens, for epochs

    @property
    def tokens(self) -> int:
        return self.steps * self.tokens_per_step

    @property
    def epochs(self) -> float:
        return self.tokens / self.train_tokens

    def lines(self, counts: dict[str, int]) -> list[str]:
        """What a run prints at its start: the steps the budget buys, the parameters, the data it means."""
        said = [
            f"trainer.flops={self.flops:.3g}: {self.steps:,} steps (trainer.max_steps) of {self.tokens_per_step:,} "
            f"tokens at {self.per_token:,} FLOPs per token (6N + 12LdT) = {self.tokens:,} tokens, "
            f"{self.epochs:.2f} epochs of the train split ({self.train_tokens:,} tokens)",
            f"parameters: {counts['all']:,} all, {counts['non_embedding']:,} without embeddings, "
            f"{counts['transformer']:,} in the transformer layers; "
            f"{self.tokens / counts['all']:.3g} tokens per parameter",
        ]
        if self.epochs > EPOCHS_WORTH_DATA:
            said.append(
                f"warning: trainer.flops={self.flops:.3g} means {self.epochs:.1f} epochs of the train split: past "
                f"~{EPOCHS_WORTH_DATA} epochs repeated text is worth less than new text (Muennighoff et al. 2025), "
                f"so the loss measures memorisation too; lower the budget or use a longer text"
            )
        return said


def budget(flops: float, per_token: int, tokens_per_step: int, train_tokens: int) -> Budget:
    """The steps a budget of `flops` buys: floor(flops / (per_token x tokens_per_step)), at least one."""
    if isinstance(flops, bool) or not isinstance(flops, (int, float)) or not math.isfinite(flops) or flops <= 0:
        raise ConfigError(f"trainer.flops must be a positive number of FLOPs, e.g. 1e12, or null, got {flops!r}")
    per_step = per_token * tokens_per_step
    steps = int(flops // per_step)
    if steps < 1:
        raise ConfigError(
            f"trainer.flops={flops:.3g} is less than one step of this model and batch ({per_step:.3g} FLOPs: "
            f"{tokens_per_step:,} tokens x {per_token:,}): raise trainer.flops to at least {per_step:.3g}"
        )
    return Budget(float(flops), per_token, tokens_per_step, steps, train_tokens)
