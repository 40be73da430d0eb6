"""What each attention head does, measured: one number per head and kind, from its weights.

A is one head's attention weights on a batch, (B, T, T): A[b, i, j] is how much query
position i takes from key position j (rows sum to 1, zero above the diagonal).

    previous-token      = mean_{b, 1<=i<T} A[b, i, i-1]
    first-token         = mean_{b, 1<=i<T} A[b, i, 0]
    attention distance  = mean_{b, 0<=i<T} sum_j A[b, i, j] (i - j)          (in positions)

On the repeated probe x = s s, s a random string of n = context_window // 2 tokens (so T = 2n
fits the window; its tokens are distinct when the vocabulary has n of them), position i of
the second copy (n <= i < 2n) holds the token of position i - n, which was followed by the
token at i - n + 1:

    duplicate-token     = mean_{b, n<=i<2n} A[b, i, i-n]
    induction           = mean_{b, n<=i<2n} A[b, i, i-n+1]

And for the whole model, with CE_t = -log p(x_t | x_<t):

    in-context (probe)  = mean_{n<t<2n} CE_t - mean_{0<t<n} CE_t    (2nd copy minus 1st copy)
    in-context (text)   = mean CE over the last quarter of a window's targets
                          - mean CE over its first quarter                 (validation text)

Both are 0 for a model that ignores its context and strongly negative once copying works
(Olsson et al. 2022, "In-context learning and induction heads"). Uniform attention, A[i, j] =
1/(i+1), scores mean_i 1/(i+1) over the positions each score averages; that is the floor a
score is read against. A head is of a kind when its score of that kind is the strongest of
the four and at least THRESHOLD.

The weights come from the plain attention path (`hidden_states(..., need_weights=True)`),
whatever path training uses. Imports only torch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

# The kinds a head can be, in the order they are shown; attention distance is a measure, not a kind.
KINDS = ("previous_token", "duplicate_token", "induction", "first_token")
MEASURES = (*KINDS, "attention_distance")
THRESHOLD = 0.4  # a head is of a kind when that score is its strongest and >= this


class ProbeTooShort(ValueError):
    """The context window is too short for the repeated probe (two copies of >= 2 tokens)."""


def probe_length(context_window: int) -> int:
    """n, the length of one copy: both copies fit the window."""
    n = context_window // 2
    if n < 2:
        raise ProbeTooShort(
            f"head scores need model.context_window >= 4 (two copies of at least 2 tokens), got {context_window}"
        )
    return n


def repeated_probe(vocab_size: int, context_window: int, batch: int = 16, seed: int = 0) -> Tensor:
    """(batch, 2n) token ids: each row a random string s of n tokens written twice, s s; fixed by `seed`,
    so every validation sees the same probe. s's tokens are distinct when the vocabulary has n."""
    n = probe_length(context_window)
    generator = torch.Generator().manual_seed(seed)
    if vocab_size >= n:
        s = torch.stack([torch.randperm(vocab_size, generator=generator)[:n] for _ in range(batch)])
    else:
        s = torch.randint(0, vocab_size, (batch, n), generator=generator)
    return torch.cat([s, s], dim=1)  # (B, 2n)


def previous_token_score(A: Tensor) -> Tensor:
    """A: (B, h, T, T) -> (h,): mean_{b, 1<=i<T} A[b, i, i-1]."""
    return A.diagonal(offset=-1, dim1=-2, dim2=-1).mean(dim=(0, -1))  # the (i, i-1) entries


def first_token_score(A: Tensor) -> Tensor:
    """A: (B, h, T, T) -> (h,): mean_{b, 1<=i<T} A[b, i, 0]."""
    return A[..., 1:, 0].mean(dim=(0, -1))


def attention_distance(A: Tensor) -> Tensor:
    """A: (B, h, T, T) -> (h,): mean_{b, i} sum_j A[b, i, j] (i - j), in positions."""
    T = A.shape[-1]
    positions = torch.arange(T, device=A.device, dtype=A.dtype)
    distance = positions[:, None] - positions[None, :]  # (T, T): i - j
    return (A * distance).sum(dim=-1).mean(dim=(0, -1))


def duplicate_token_score(A: Tensor, n: int) -> Tensor:
    """A on the repeated probe: (B, h, 2n, 2n) -> (h,): mean_{b, n<=i<2n} A[b, i, i-n]."""
    return A.diagonal(offset=-n, dim1=-2, dim2=-1).mean(dim=(0, -1))  # entries (n, 0) .. (2n-1, n-1)


def induction_score(A: Tensor, n: int) -> Tensor:
    """A on the repeated probe: (B, h, 2n, 2n) -> (h,): mean_{b, n<=i<2n} A[b, i, i-n+1]."""
    return A.diagonal(offset=-(n - 1), dim1=-2, dim2=-1)[..., 1:].mean(dim=(0, -1))  # (n, 1) .. (2n-1, n)


def score_heads(weights: list[Tensor], n: int) -> dict[str, Tensor]:
    """Each layer's weights on the repeated probe, (B, h, 2n, 2n) -> {measure: (layers, h)}."""
    per_layer = {
        "previous_token": [previous_token_score(A) for A in weights],
        "duplicate_token": [duplicate_token_score(A, n) for A in weights],
        "induction": [induction_score(A, n) for A in weights],
        "first_token": [first_token_score(A) for A in weights],
        "attention_distance": [attention_distance(A) for A in weights],
    }
    return {measure: torch.stack(rows) for measure, rows in per_layer.items()}


def token_losses(logits: Tensor, idx: Tensor) -> Tensor:
    """CE_t = -log p(x_t | x_<t) for t = 1..T-1: logits (B, T, V), idx (B, T) -> (B, T-1)."""
    log_probs = logits[:, :-1].float().log_softmax(dim=-1)  # position t-1 predicts x_t
    return -log_probs.gather(-1, idx[:, 1:, None]).squeeze(-1)


def in_context_probe(logits: Tensor, idx: Tensor, n: int) -> float:
    """mean_{n<t<2n} CE_t - mean_{0<t<n} CE_t on the repeated probe: the 2nd copy against the 1st
    (t = 0 and t = n left out: nothing in the context predicts them)."""
    CE = token_losses(logits, idx)  # (B, 2n-1); column t-1 holds CE_t
    first, second = CE[:, : n - 1], CE[:, n:]  # t = 1..n-1 and t = n+1..2n-1
    return float(second.mean() - first.mean())


def in_context_text(logits: Tensor, idx: Tensor) -> float:
    """Mean CE over the last quarter of the window's targets minus the first quarter (validation text)."""
    CE = token_losses(logits, idx)  # (B, T-1)
    quarter = max(1, CE.shape[1] // 4)
    return float(CE[:, -quarter:].mean() - CE[:, :quarter].mean())


@dataclass
class HeadScores:
    """Every head's scores and the model's in-context scores, at one moment of training."""

    scores: dict[str, Tensor]  # measure -> (layers, heads)
    in_context: float  # on the repeated probe
    in_context_text: float | None  # on validation windows; None without them
    probe_maps: list[Tensor]  # the first probe's weights per layer, (heads, 2n, 2n)

    def kinds(self) -> list[list[str | None]]:
        """Each head's kind: its strongest score of KINDS when >= THRESHOLD, else None."""
        stacked = torch.stack([self.scores[kind] for kind in KINDS])  # (kinds, layers, heads)
        best, which = stacked.max(dim=0)
        return [
            [KINDS[k] if b >= THRESHOLD else None for b, k in zip(row_best.tolist(), row_which.tolist(), strict=True)]
            for row_best, row_which in zip(best, which, strict=True)
        ]

    def summary(self) -> dict[str, float | int | None]:
        """What a run's result.json and a sweep's summary keep: heads per kind, the best scores."""
        kinds = [kind for row in self.kinds() for kind in row]
        counts = {f"{kind}_heads": kinds.count(kind) for kind in KINDS}
        return {
            **counts,
            "best_induction": float(self.scores["induction"].max()),
            "best_previous_token": float(self.scores["previous_token"].max()),
            "in_context": self.in_context,
            "in_context_text": self.in_context_text,
        }


@torch.no_grad()
def measure_heads(model: torch.nn.Module, probe: Tensor, text: Tensor | None = None) -> HeadScores:
    """Every head's scores on the repeated `probe` (B, 2n), and the in-context score on `text` (B', T)."""
    was_training = model.training
    model.eval()
    try:
        n = probe.shape[1] // 2
        H, weights = model.hidden_states(probe, need_weights=True)  # weights per layer: (B, h, 2n, 2n)
        scores = score_heads(weights, n)
        in_context = in_context_probe(model.logits(H), probe, n)
        text_score = None
        if text is not None:
            H_text, _ = model.hidden_states(text)
            text_score = in_context_text(model.logits(H_text), text)
    finally:
        model.train(was_training)
    return HeadScores(scores, in_context, text_score, [A[0] for A in weights])
