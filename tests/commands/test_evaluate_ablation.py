"""`python -m src.evaluate ablate=...`: the loss with and without the heads named; a head that is not there, refused."""

import re

import pytest

from tests.helpers import assert_refused, run_main


@pytest.mark.slow
def test_evaluate_prints_the_loss_without_the_heads_it_is_given(trained):
    run_dir, _ = trained  # tiny_training's model: 2 layers of 2 heads
    result = run_main("evaluate", f"ckpt_path={run_dir}", "val_tokens=2000", "ablate=L1H0")
    assert result.returncode == 0, result.stderr
    base = float(re.search(r"^val\s+([0-9.]+)", result.stdout, re.M)[1])
    found = re.search(r"^val without L1H0 \(zero ablation\): loss ([0-9.]+) \(([+-][0-9.]+)\)$", result.stdout, re.M)
    assert found is not None, result.stdout
    without, rise = float(found[1]), float(found[2])
    assert without != base and rise == pytest.approx(without - base, abs=2e-4)

    both = run_main("evaluate", f"ckpt_path={run_dir}", "val_tokens=2000", "ablate=[L0H0,L1H1]", "ablate_mode=mean")
    assert both.returncode == 0, both.stderr
    assert re.search(r"^val without L0H0, L1H1 \(mean ablation\): loss [0-9.]+ \([+-]", both.stdout, re.M)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("override", "pattern"),
    [
        ("ablate=L9H9", r"^error: ablate=L9H9 is not a head of this model, which has layers L0-L1 and heads H0-H1: "),
        ("ablate=L0X", r"^error: ablate=L0X is not a head: write L<layer>H<head>, e\.g\. ablate=L0H2"),
        ("ablate=5", r"^error: ablate=5 is not a head: write L<layer>H<head>"),
        ("ablate=[]", r"^error: ablate names no head"),
        ("ablate_mode=half", r"^error: ablate_mode must be one of zero, mean, got 'half'"),
    ],
)
def test_a_head_that_is_not_there_is_one_line_and_exit_2(trained, override, pattern):
    run_dir, _ = trained
    assert_refused(run_main("evaluate", f"ckpt_path={run_dir}", "val_tokens=2000", override), pattern)
