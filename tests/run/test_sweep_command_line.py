"""A multirun's command line is refused in one line, as a single run's is, not in a traceback.

Issue 37 item 16: `hparams_search=optuna hydra.sweeper.n_trials=0` (or -1) ended in `ValueError: No
trials are completed yet`; `-m "model.num_heads=1,2,"` in an OverrideParseException traceback (the
same typo without -m got a good line).
"""

import pytest

from src.run.cli import check_command_line


@pytest.mark.parametrize(
    "argv,said",
    [
        (["hparams_search=optuna", "hydra.sweeper.n_trials=0"], "error: hydra.sweeper.n_trials must be a positive"),
        (["-m", "hparams_search=optuna", "hydra.sweeper.n_trials=-1"], "error: hydra.sweeper.n_trials must be"),
        (["-m", "model.num_heads=1,2,"], "error: cannot parse the override 'model.num_heads=1,2,': quote a value"),
    ],
)
def test_a_sweeps_bad_command_line_is_one_line(capsys, argv, said):
    with pytest.raises((SystemExit, ValueError)) as refused:
        check_command_line("train", argv, None)
    if isinstance(refused.value, SystemExit):
        assert refused.value.code == 2
        err = capsys.readouterr().err.strip()
    else:  # raised for command() to print as one line
        err = f"error: {refused.value}"
    assert err.startswith(said) and "\n" not in err, err
