"""Muon: Newton-Schulz orthogonalises, one step matches torch.optim.Muon, the AdamW groups match
torch.optim.AdamW, the groups hold the right parameters, and the state restores exactly."""

from __future__ import annotations

import pytest
import torch

from src.training.muon import MuonWithAdamW, newton_schulz
from src.training.optim import apply_settings, build_optimizer, build_schedule
from tests.model.tiny_models import VOCAB, tiny_model

MUON = {
    "name": "muon",
    "lr": 0.02,
    "momentum": 0.95,
    "nesterov": True,
    "ns_steps": 5,
    "weight_decay": 0.0,
    "adam_lr": 2e-3,
    "betas": [0.9, 0.99],
    "warmup_steps": 0,
    "min_lr": 2e-3,
    "decay_steps": 10,
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", [(16, 16), (16, 64), (64, 16), (120, 480)])
def test_newton_schulz_pushes_every_singular_value_near_1(shape, dtype):
    """G = U S V^T with singular values spread 100-fold; Newton-Schulz returns ~U V^T, no SVD taken."""
    g = torch.Generator().manual_seed(0)
    m, n = shape
    U, _ = torch.linalg.qr(torch.randn(m, min(m, n), generator=g))
    V, _ = torch.linalg.qr(torch.randn(n, min(m, n), generator=g))
    S = torch.logspace(-2, 0, min(m, n)) * 5
    O = newton_schulz(U @ torch.diag(S) @ V.T, dtype=dtype).float()  # noqa: E741
    s = torch.linalg.svdvals(O)
    assert s.min() > 0.6 and s.max() < 1.25, s  # the quintic's band around 1 (Jordan: ~U(0.5, 1.5))
    cosine = (O * (U @ V.T)).sum() / (O.norm() * (U @ V.T).norm())
    assert cosine > 0.98  # the same singular vectors: the orthogonal factor U V^T, approximately


def test_one_step_matches_torch_optim_muon():
    """torch runs Newton-Schulz in bfloat16, we in float32: equal within bfloat16's precision. Torch
    stores weights (fan_out, fan_in); ours are (fan_in, fan_out), so it steps the transposes."""
    g = torch.Generator().manual_seed(1)
    W = torch.randn(12, 48, generator=g) * 0.1  # (fan_in, fan_out): the update scale is sqrt(48 / 12) = 2
    ours = torch.nn.Parameter(W.clone())
    theirs = torch.nn.Parameter(W.t().clone())
    mine = MuonWithAdamW([{"params": [ours], "muon": True, "lr": 0.02, "weight_decay": 0.01}])
    torch_muon = torch.optim.Muon([theirs], lr=0.02, weight_decay=0.01, momentum=0.95, nesterov=True)
    for _ in range(3):  # the momentum buffer carries over
        G = torch.randn(12, 48, generator=g)
        ours.grad, theirs.grad = G.clone(), G.t().clone()
        mine.step()
        torch_muon.step()
        step, difference = (ours - W).detach(), (ours - theirs.t()).detach()
        assert difference.abs().max() < 0.03 * step.abs().max()  # bfloat16 keeps 8 bits: ~0.4 % per rounding
        assert difference.norm() < 0.03 * step.norm()
    assert step.abs().max() > 0.02  # it moved: three steps of lr 0.02 times 2


def test_bfloat16_iterations_step_as_the_float32_ones():
    """ns_dtype bfloat16 (the reference's precision, ~4x faster on a CPU with bf16 matmuls): three
    steps move the weights as the float32 iterations do, within bfloat16's ~8 bits."""
    g = torch.Generator().manual_seed(1)
    W = torch.randn(12, 48, generator=g) * 0.1
    single, half = torch.nn.Parameter(W.clone()), torch.nn.Parameter(W.clone())
    groups = [
        {"params": [p], "muon": True, "lr": 0.02, "ns_dtype": d} for p, d in ((single, "float32"), (half, "bfloat16"))
    ]
    optimizers = [MuonWithAdamW([group]) for group in groups]
    for _ in range(3):
        G = torch.randn(12, 48, generator=g)
        single.grad, half.grad = G.clone(), G.clone()
        for optimizer in optimizers:
            optimizer.step()
    step, difference = (single - W).detach(), (half - single).detach()
    assert 0 < difference.norm() < 0.03 * step.norm()  # not the same arithmetic, the same step
    assert half.dtype == torch.float32  # the weights stay float32: only the iterations are bfloat16


def test_the_adamw_groups_equal_torch_adamw():
    g = torch.Generator().manual_seed(2)
    p0 = torch.randn(5, 7, generator=g)
    ours, theirs = torch.nn.Parameter(p0.clone()), torch.nn.Parameter(p0.clone())
    mine = MuonWithAdamW([{"params": [ours], "muon": False, "lr": 3e-3, "weight_decay": 0.1, "betas": (0.9, 0.99)}])
    reference = torch.optim.AdamW([theirs], lr=3e-3, weight_decay=0.1, betas=(0.9, 0.99), eps=1e-8)
    for _ in range(5):
        G = torch.randn(5, 7, generator=g)
        ours.grad, theirs.grad = G.clone(), G.clone()
        mine.step()
        reference.step()
    torch.testing.assert_close(ours, theirs, atol=1e-7, rtol=0)


def test_muon_takes_the_hidden_matrices_and_adamw_the_rest(kind):
    model = tiny_model(kind, tie_weights=False) if kind == "gpt" else tiny_model(kind)
    optimizer = build_optimizer(model, MUON)
    muon, adamw = optimizer.param_groups
    names = {id(p): n for n, p in model.named_parameters()}
    hidden = sorted({names[id(p)].rsplit(".", 1)[-1] for p in muon["params"]})
    rest = sorted({names[id(p)].rsplit(".", 1)[-1] for p in adamw["params"]})
    expected_hidden = ["W_1", "W_2", "W_K", "W_O", "W_Q", "W_V"] if kind == "gpt" else ["W_K", "W_O", "W_Q", "W_V"]
    assert hidden == expected_hidden
    assert "E" in rest and ("W_vocab" in rest if kind == "gpt" else "W_out" in rest)  # embedding and head: AdamW
    assert (muon["lr"], adamw["lr"], muon["muon"], adamw["muon"]) == (0.02, 2e-3, True, False)
    assert len(muon["params"]) + len(adamw["params"]) == len(list(model.parameters()))


def test_the_schedule_scales_both_rates_and_resuming_applies_the_typed_ones():
    model = tiny_model("gpt")
    optimizer = build_optimizer(model, MUON)
    schedule = build_schedule(optimizer, MUON)
    for _ in range(10):
        optimizer.step()
        schedule.step()
    assert [g["lr"] for g in optimizer.param_groups] == pytest.approx([2e-3, 2e-4])  # both at min_lr / lr
    apply_settings(optimizer, schedule, {**MUON, "lr": 0.04, "adam_lr": 1e-3, "decay_steps": 20})
    assert optimizer.param_groups[0]["lr"] > 0.02 and optimizer.param_groups[1]["lr"] > 5e-4  # half-way down


def test_the_saved_state_continues_exactly(kind):
    """Three steps, save, a fresh optimizer loads the state, three more: the same weights as six in a row."""

    def run(model, optimizer, steps, seed):
        g = torch.Generator().manual_seed(seed)
        for _ in range(steps):
            idx = torch.randint(0, VOCAB, (4, model.context_window), generator=g)
            optimizer.zero_grad()
            model(idx, idx.roll(-1, 1))[1].backward()
            optimizer.step()

    straight = tiny_model(kind)
    optimizer = build_optimizer(straight, MUON)
    run(straight, optimizer, 3, 0)
    saved_model, saved_state = straight.state_dict(), optimizer.state_dict()
    saved_model = {k: v.clone() for k, v in saved_model.items()}
    import copy

    saved_state = copy.deepcopy(saved_state)
    run(straight, optimizer, 3, 1)

    resumed = tiny_model(kind)
    resumed.load_state_dict(saved_model)
    optimizer = build_optimizer(resumed, MUON)
    optimizer.load_state_dict(saved_state)
    run(resumed, optimizer, 3, 1)
    for (name, p), q in zip(straight.state_dict().items(), resumed.state_dict().values(), strict=True):
        assert torch.equal(p, q), name
