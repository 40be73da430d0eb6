"""isoFLOP fits (issue 46): a parabola in log N through the best size and its neighbours recovers a known
optimum, also beside a plateau, the power laws across budgets recover known exponents, and a budget with
fewer than 3 sizes or its best size at an edge is left out, said in one line."""

import math

import pytest

from src.sweeps.isoflop import IsoFlopRefused, best_sizes, fit_parabola, isoflop_fit, isoflop_text

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
    assert (parabola.low, parabola.high) == (1e4, 1e5)  # the best swept size, 3e4, and its neighbours


def test_a_plateau_far_from_the_minimum_does_not_move_it():
    """A step-starved large model sits on the unigram plateau: a parabola over every size would open downward."""
    sizes = [4e3, 3e4, 9e4, 2e5, 4e5]
    losses = [2.0 + 0.1 * (math.log(n) - math.log(3e4)) ** 2 for n in sizes[:3]] + [3.35, 3.35]
    parabola = fit_parabola(sizes, losses)
    assert math.exp(parabola.x_min) == pytest.approx(3e4, rel=1e-6)
    assert (parabola.low, parabola.high) == (4e3, 9e4)


def test_a_best_size_at_an_edge_is_refused_with_the_fix():
    sizes = [4e3, 3e4, 9e4]
    with pytest.raises(IsoFlopRefused) as smallest:
        fit_parabola(sizes, [2.1, 2.2, 2.5], "5e+11 (seed 1)")
    assert str(smallest.value) == (
        "budget 5e+11 (seed 1): the best size is the smallest swept (N = 4,000), so the minimum lies outside "
        "the sweep: sweep smaller sizes or a larger budget"
    )
    with pytest.raises(IsoFlopRefused, match=r"the best size is the largest swept \(N = 90,000\).*larger sizes$"):
        fit_parabola(sizes, [2.5, 2.2, 2.1])


def test_the_fit_recovers_the_optima_and_their_exponents_under_each_count():
    fit = isoflop_fit(rows())
    for C in BUDGETS:
        for seed in (1, 2, 3):
            optimum = fit.optima["all"][C][str(seed)]
            assert optimum.n_opt == pytest.approx(n_opt(C, seed), rel=1e-6)
            assert optimum.d_opt == pytest.approx(C / (6 * n_opt(C, seed)), rel=1e-6)  # D = C / 6N at N_opt
            assert fit.optima["transformer"][C][str(seed)].n_opt == pytest.approx(n_opt(C, seed) / 2, rel=1e-5)
    for count in ("all", "non_embedding", "transformer"):
        assert fit.alpha[count] == pytest.approx([0.5] * 3, abs=1e-6)
        assert fit.beta[count] == pytest.approx([0.5] * 3, abs=1e-6)
    text, _ = isoflop_text(rows())
    assert "| all | 0.500 +- 0.000 | 0.500 +- 0.000 |" in text


def test_a_budget_that_cannot_be_fitted_is_left_out_and_said_so():
    two = ("model.scale=30000", "model.scale=100000")
    few = [r for r in rows() if "trainer.flops=1e+13" not in r["overrides"] or r["overrides"][1] in two]
    text, fit = isoflop_text(few)
    assert fit is not None and list(fit.optima["all"]) == [1e12, 1e14]
    assert fit.alpha["all"] == pytest.approx([0.5] * 3, abs=1e-6)  # from the two budgets left
    assert (
        "Left out of the fit: budget 1e+13 (seed 1) has 2 model size(s): a parabola in log N needs at least 3; "
        "sweep more sizes (model.scale=1,2,3,4,5)"
    ) in text.splitlines()
    assert "| 1e+13 | 2 | 100,000 (the largest swept) |" in text  # what the sweep saw is still said


def test_fewer_than_two_budgets_fitted_is_refused_in_one_line():
    dropped = ("trainer.flops=1e+12", "model.scale=30000")  # 1e12's best size becomes its smallest
    edge = [r for r in rows() if not all(o in r["overrides"] for o in dropped)]
    one = [r for r in edge if "trainer.flops=1e+14" not in r["overrides"]]
    text, fit = isoflop_text(one)
    assert fit is None
    assert text.splitlines()[-1] == (
        "No isoFLOP fit: 1 budget(s) of 2 with a minimum inside the sweep: exponents across budgets need at "
        "least 2 (budget 1e+12 (seed 1): the best size is the smallest swept (N = 100,000), so the minimum lies "
        "outside the sweep: sweep smaller sizes or a larger budget)"
    )


def test_a_budget_smaller_than_its_model_shows_its_tokens_per_parameter():
    """3,200 tokens for 14,464 parameters read "0" in the table of best sizes."""
    counts = {"all": 14464, "non_embedding": 13000, "transformer": 12000}
    row = {"job": 0, "overrides": ["trainer.flops=3e+08"], "status": "ok", "best_val_loss": 4.05}
    table = best_sizes([row | {"parameter_counts": counts, "tokens": 3200}])
    assert table.splitlines()[-1] == "| 3e+08 | 1 | 14,464 (the smallest swept) | 4.0500 | 3,200 | 0.2 |"


def test_a_sweep_without_swept_seeds_names_its_budgets_without_one():
    """It read "budget 3e+08 (seed -) has 1 model size(s)"."""
    unseeded = [r | {"overrides": r["overrides"][:2]} for r in rows(sizes=SIZES[:2], seeds=(1,))]
    text, fit = isoflop_text(unseeded)
    assert fit is None and "budget 1e+12 has 2 model size(s): a parabola in log N needs at least 3" in text
    assert "seed" not in text.splitlines()[-1]
