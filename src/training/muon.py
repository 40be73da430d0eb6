"""Muon (Keller Jordan, 2024): momentum, then the update of each weight matrix orthogonalised.

For a 2-D weight W with gradient G, at every step

    B  = mu B + (1 - mu) G                          momentum (an average of the gradients)
    U  = (1 - mu) G + mu B                          Nesterov: look one step ahead
    O  = NewtonSchulz(U)  ~  U' V^T  of U = U' S V^T: every singular value pushed towards 1
    W  = W - lr * wd * W - lr * sqrt(max(1, fan_out / fan_in)) * O

so the step moves every direction of the matrix by about the same amount, however lopsided the
gradient's spectrum. NewtonSchulz never computes an SVD: it scales U so its singular values are
<= 1, then applies X <- a X + b (X X^T) X + c (X X^T)^2 X five times, an odd polynomial that
drives each singular value towards 1 (`ns_dtype` bfloat16: faster on a CPU with bf16 matmuls,
BENCHMARKS.md, "Speedrun"). The embeddings, the head, gains and biases follow AdamW, in the same
optimizer, so a checkpoint saves and restores both states at once.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import torch
from torch import Tensor

COEFFICIENTS = (3.4445, -4.7750, 2.0315)  # a, b, c of the quintic, from the reference implementation


def newton_schulz(G: Tensor, steps: int = 5, eps: float = 1e-7, dtype: torch.dtype = torch.float32) -> Tensor:
    """The orthogonal factor of G (m, n), approximately: its singular values end near 1 (0.7 to 1.2)."""
    a, b, c = COEFFICIENTS
    X = G.to(dtype)
    wide = X.shape[0] <= X.shape[1]
    if not wide:
        X = X.T  # iterate on the short side: X X^T is then the smaller Gram matrix
    X = X / (X.norm() + eps)  # Frobenius norm >= spectral norm: every singular value now <= 1
    for _ in range(steps):
        A = X @ X.T  # (m, m)
        X = a * X + (b * A + c * A @ A) @ X  # each singular value s -> a s + b s^3 + c s^5
    return (X if wide else X.T).to(G.dtype)


class MuonWithAdamW(torch.optim.Optimizer):
    """Muon for the groups marked "muon": True, AdamW for the others. Weights are stored (fan_in, fan_out)
    here, as X @ W reads them."""

    def __init__(self, groups: Iterable[dict[str, Any]]):
        defaults = dict(lr=1e-3, weight_decay=0.0, momentum=0.95, nesterov=True, ns_steps=5, ns_dtype="float32")
        defaults.update(betas=(0.9, 0.99), eps=1e-8, muon=False)
        super().__init__(list(groups), defaults)
        for group in self.param_groups:
            if group["muon"] and any(p.dim() != 2 for p in group["params"]):
                raise ValueError("Muon updates weight matrices only: put other parameters in an AdamW group")

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    (self._muon if group["muon"] else self._adamw)(p, group)
        return loss

    def _muon(self, W: Tensor, group: dict[str, Any]) -> None:
        G, state, mu = W.grad, self.state[W], group["momentum"]
        if "momentum_buffer" not in state:
            state["momentum_buffer"] = torch.zeros_like(W)
        B = state["momentum_buffer"]
        B.lerp_(G, 1 - mu)  # B = mu B + (1 - mu) G
        U = G.lerp(B, mu) if group["nesterov"] else B  # (1 - mu) G + mu B
        O = newton_schulz(U, group["ns_steps"], dtype=getattr(torch, group["ns_dtype"]))  # noqa: E741 (the O of the formula)
        fan_in, fan_out = W.shape
        W.mul_(1 - group["lr"] * group["weight_decay"])
        W.add_(O, alpha=-group["lr"] * math.sqrt(max(1.0, fan_out / fan_in)))

    def _adamw(self, p: Tensor, group: dict[str, Any]) -> None:
        """m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;  p -= lr (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)."""
        g, state = p.grad, self.state[p]
        beta_1, beta_2 = group["betas"]
        if "step" not in state:
            state["step"] = torch.zeros((), dtype=torch.float32)
            state["exp_avg"] = torch.zeros_like(p)
            state["exp_avg_sq"] = torch.zeros_like(p)
        state["step"] += 1
        t = state["step"].item()
        m, v = state["exp_avg"], state["exp_avg_sq"]
        m.lerp_(g, 1 - beta_1)
        v.mul_(beta_2).addcmul_(g, g, value=1 - beta_2)
        p.mul_(1 - group["lr"] * group["weight_decay"])  # decoupled weight decay
        denominator = (v / (1 - beta_2**t)).sqrt_().add_(group["eps"])
        p.addcdiv_(m, denominator, value=-group["lr"] / (1 - beta_1**t))
