"""A multirun's command line is refused in one line, as a single run's is, not in a traceback.

Issue 37 item 16: `hparams_search=optuna hydra.sweeper.n_trials=0` (or -1) ended in `ValueError: No
trials are completed yet`; `-m "model.num_heads=1,2,"` in an OverrideParseException traceback (the
same typo without -m got a good line); an Optuna search space written the sweeper's own way
(`hydra.sweeper.params.model.num_heads=choice(3,5)`) was refused as an unknown key, once per point.
"""

import json

import pytest

from src.run.cli import check_command_line
from src.run.points import search_space_as_overrides
from src.train import main as train_main
from tests.helpers import assert_refused, run_in_process, run_main, tiny_training


@pytest.mark.parametrize(
    "argv,said",
    [
        (["hparams_search=optuna", "hydra.sweeper.n_trials=0"], "error: hydra.sweeper.n_trials must be a positive"),
        (["-m", "hparams_search=optuna", "hydra.sweeper.n_trials=-1"], "error: hydra.sweeper.n_trials must be"),
        (["-m", "model.num_heads=1,2,"], "error: cannot parse the override 'model.num_heads=1,2,': quote a value"),
        (["hparams_search=optuna", "hydra.sweeper.n_jobs=2"], "error: hydra.sweeper.n_jobs is gone: trials in para"),
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


@pytest.mark.parametrize(
    "argv",
    [
        ["-m", "model.num_haeds=1,2,4"],
        ["hparams_search=optuna", "hydra.sweeper.params.model.num_haeds=choice(3,5)"],
    ],
)
def test_a_misspelt_key_that_every_sweep_point_shares_is_refused_once(tmp_path, monkeypatch, capsys, argv):
    """It was said once per point (three lines for three points, each the same)."""
    refused = run_in_process(monkeypatch, capsys, train_main, [*argv, f"paths.log_dir={tmp_path}"])
    assert_refused(refused, r"^error: unknown config key 'model.num_haeds': did you mean model.num_heads\?")
    assert not any(tmp_path.iterdir())


def test_a_search_space_written_the_sweepers_own_way_is_its_search_space():
    """`hydra.sweeper.params.<key>=<space>` (Hydra's key, not ours: it was refused as an unknown key, and
    Hydra itself refuses a sweep of its own config) is the override `<key>=<space>`; an override typed for
    the same key wins, as it does over a sweeper's params in Hydra."""
    argv = ["hparams_search=optuna", "hydra.sweeper.params.model.num_heads=choice(3,5)", "-m", "seed=1"]
    assert search_space_as_overrides(argv) == ["hparams_search=optuna", "model.num_heads=choice(3,5)", "-m", "seed=1"]
    assert search_space_as_overrides([*argv, "model.num_heads=2"]) == ["hparams_search=optuna", "-m", "seed=1"] + [
        "model.num_heads=2"
    ]
    check_command_line("train", search_space_as_overrides(argv), None)  # accepted: no SystemExit


@pytest.mark.slow
def test_optuna_draws_from_a_search_space_typed_the_sweepers_own_way(tmp_path):
    """End to end, without -m (hparams_search's config sets the mode): the trials' heads and width come
    from the typed spaces (1 or 5 heads of 30 dimensions), none from the config's (2, 4, 8 of 64 to 128)."""
    sweep = tmp_path / "optuna"
    args = [a for a in tiny_training(tmp_path, f"hydra.sweep.dir={sweep}") if not a.startswith(("model.", "trainer."))]
    spaces = ["hydra.sweeper.params.model.num_heads=choice(1,5)", "hydra.sweeper.params.model.embedding_dim=choice(30)"]
    fast = ["model.num_layers=1", "model.context_window=16", "trainer.max_steps=4", "trainer.val_check_interval=4"]
    result = run_main("train", "hparams_search=optuna", "hydra.sweeper.n_trials=2", *spaces, *fast, *args)
    assert result.returncode == 0, result.stderr[-3000:]
    for job in ("0", "1"):
        overrides = (sweep / job / ".hydra" / "overrides.yaml").read_text()
        assert "model.embedding_dim=30" in overrides, overrides
        assert "model.num_heads=1" in overrides or "model.num_heads=5" in overrides, overrides
        assert json.loads((sweep / job / "result.json").read_text())["status"] == "ok"
