"""isoFLOP fits (issue 46): a parabola in log N per budget recovers a known optimum, the power laws across
budgets recover known exponents, and a budget with fewer than 3 sizes is refused in one line."""

import math

import pytest

from src.sweeps.isoflop import fit_parabola, isoflop_fit, isoflop_text

BUDGETS = (1e12, 1e13, 1e14)
SIZES = (3e4, 1e5, 3e5, 1e6, 3e6)


def n_opt(C: float, seed: int) -> float:
    """A known optimum: N_opt = 0.1 C^0.5, shifted a little per seed."""
    return 0.1 * C**0.5 * (1 + 0.02 * seed)


def rows(budgets=BUDGETS, sizes=SIZES, seeds=(1, 2, 3)) -> list[dict]:
    """Jobs whose loss is an exact parabola in log N around n_opt; D = C / 6N; the transformer count is N / 2."""
    made = []
    for C in budgets:
        for N in sizes:
            for seed in seeds:
                loss = 2.0 + 5.0 / math.log(C) + 0.08 * (math.log(N) - math.log(n_opt(C, seed))) ** 2
                counts = {"all": round(N), "non_embedding": round(N), "transformer": round(N / 2)}
                overrides = [f"trainer.flops={C:g}", f"model.scale={N:g}", f"seed={seed}"]
                made.append(
                    {"job": len(made), "overrides": overrides, "status": "ok", "best_val_loss": loss}
                    | {"parameter_counts": counts, "tokens": C / (6 * N)}
                )
    return made


def test_the_parabola_recovers_a_known_minimum():
    sizes = [1e4, 3e4, 1e5, 3e5]
    parabola = fit_parabola(sizes, [1.9 + 0.1 * (math.log(n) - math.log(5e4)) ** 2 for n in sizes])
    assert math.exp(parabola.x_min) == pytest.approx(5e4, rel=1e-6)
    assert parabola(parabola.x_min) == pytest.approx(1.9)


def test_the_fit_recovers_the_optima_and_their_exponents_under_each_count():
    fit = isoflop_fit(rows())
    for C in BUDGETS:
        for seed in (1, 2, 3):
            optimum = fit.optima["all"][C][str(seed)]
            assert optimum.n_opt == pytest.approx(n_opt(C, seed), rel=1e-6) and optimum.inside
            assert optimum.d_opt == pytest.approx(C / (6 * n_opt(C, seed)), rel=1e-6)  # D = C / 6N at N_opt
            assert fit.optima["transformer"][C][str(seed)].n_opt == pytest.approx(n_opt(C, seed) / 2, rel=1e-5)
    for count in ("all", "non_embedding", "transformer"):
        assert fit.alpha[count] == pytest.approx([0.5] * 3, abs=1e-6)
        assert fit.beta[count] == pytest.approx([0.5] * 3, abs=1e-6)
    text, _ = isoflop_text(rows())
    assert "| all | 0.500 +- 0.000 | 0.500 +- 0.000 |" in text


def test_a_budget_with_fewer_than_three_sizes_is_refused_in_one_line():
    two = ("model.scale=30000", "model.scale=100000")
    few = [r for r in rows() if "trainer.flops=1e+13" not in r["overrides"] or r["overrides"][1] in two]
    text, fit = isoflop_text(few)
    assert fit is None
    assert "| 1e+13 | 2 | 100,000 (the largest swept) |" in text  # what the sweep saw is still said
    assert text.splitlines()[-1] == (
        "No isoFLOP fit: budget 1e+13 (seed 1) has 2 model size(s): a parabola in log N needs at least 3; "
        "sweep more sizes (model.scale=1,2,3,4,5)"
    )
