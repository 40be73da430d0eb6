"""Reference bands (src/training/bands.py): a run of a config with a band says where each val loss sits,
in its log, result.json and TensorBoard; a broken learning rate lands above it; a config without a band,
when one is required, is refused in one line. The band here is a small fixture shaped as
`python -m benchmarks.bands` writes one, not a real preset's, so that the runs take seconds."""

import json

import pytest

from src.data.corpus import sha256_of
from src.training.bands import config_key
from tests.helpers import ROOT, assert_refused, compose_training, run_main, scalars, shakespeare_file, tiny_training

QUIET = ("callbacks.sample_text=null", "callbacks.attention_maps=null", "sample.max_new_tokens=0", "explorer=false")
# The tiny config's val loss at its three validations (its seed, 1337, measured 4.1996, 3.4119 and 3.3785).
FIXTURE = {"0": 4.20, "20": 3.41, "40": 3.38}


def custom_scalars_layout(events_dir):
    """The CUSTOM SCALARS layout a run wrote, as TensorBoard reads it."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.custom_scalar import layout_pb2

    events = EventAccumulator(str(events_dir), size_guidance={"tensors": 0})
    events.Reload()
    (config,) = events.Tensors("custom_scalars__config__")
    return layout_pb2.Layout.FromString(config.tensor_proto.string_val[0])


def write_band(folder, run_dir):
    """A band of 5 seeds (std 0.03: the band is mean +- 0.09) for the tiny config, in folder/tiny.json."""
    key = config_key(compose_training(run_dir, *QUIET), sha256_of(shakespeare_file()))
    steps = {s: {"mean": m, "std": 0.03, "min": m - 0.04, "max": m + 0.04, "n": 5} for s, m in FIXTURE.items()}
    folder.mkdir()
    path = folder / "tiny.json"
    path.write_text(json.dumps({"preset": "tiny", "seeds": [0, 1, 2, 3, 4], "config": key, "steps": steps}))
    return path


def test_a_run_of_the_band_s_config_is_within_it(tmp_path, caplog):
    from src.train import train

    run_dir, folder = tmp_path / "run", tmp_path / "bands"
    write_band(folder, run_dir)
    with caplog.at_level("INFO"):
        train(compose_training(run_dir, *QUIET, f"callbacks.band.folder={folder}"))
    assert "step     40 | band: 3.378" in caplog.text
    assert ", within the band of 5 seeds, 3.29-3.47" in caplog.text
    band = json.loads((run_dir / "result.json").read_text())["band"]
    assert band["file"] == str(folder / "tiny.json") and band["note"] == ""
    assert [band["steps"][s]["where"] for s in ("0", "20", "40")] == ["within"] * 3
    curves = scalars(run_dir)
    assert [step for step, _ in curves["band/low"]] == [0, 20, 40]
    assert curves["band/high"][-1][1] == pytest.approx(band["steps"]["40"]["high"])
    (category,) = custom_scalars_layout(run_dir / "tensorboard").category  # CUSTOM SCALARS: loss/val in its band
    (chart,) = category.chart
    (series,) = chart.margin.series
    assert chart.title == "loss/val inside the band of its seeds"
    assert (series.value, series.lower, series.upper) == ("loss/val", "band/low", "band/high")


def test_a_broken_learning_rate_is_above_the_band(tmp_path, caplog):
    from src.train import train

    run_dir = tmp_path / "run"
    path = write_band(tmp_path / "bands", run_dir)
    with caplog.at_level("INFO"):
        train(compose_training(run_dir, *QUIET, "optimizer.lr=1e-6", f"callbacks.band.file={path}"))
    assert f"comparing with the band {path}, whose config differs in optimizer.lr" in caplog.text
    assert ": above the band of 5 seeds, 3.29-3.47: check your change" in caplog.text
    band = json.loads((run_dir / "result.json").read_text())["band"]
    assert band["steps"]["40"]["where"] == "above" and band["steps"]["40"]["val_loss"] > 4


def test_no_band_for_the_config_when_one_is_required(tmp_path):
    folder = tmp_path / "bands"
    write_band(folder, tmp_path / "run")
    args = tiny_training(tmp_path, *QUIET, "model.num_heads=4", f"callbacks.band.folder={folder}")
    result = run_main("train", *args, f"hydra.run.dir={tmp_path / 'run'}", "callbacks.band.required=true")
    assert_refused(
        result,
        r"callbacks\.band\.required=true but no reference band is made for this config \(the nearest, .*tiny\.json, "
        r"differs in model\.num_heads\): make one with python -m benchmarks\.bands",
    )
    assert not (tmp_path / "run").exists()


def test_a_band_ignores_the_seed_and_where_a_run_writes_and_names_a_changed_key_once(tmp_path):
    from src.training.bands import ReferenceBand

    sha = sha256_of(shakespeare_file())
    folder = tmp_path / "bands"
    write_band(folder, tmp_path / "run")
    elsewhere = compose_training(tmp_path / "other" / "run", *QUIET, "seed=7", "data.num_workers=1")
    assert ReferenceBand(str(folder), run_key=config_key(elsewhere, sha)).note == ""  # the band applies
    changed = config_key(compose_training(tmp_path / "run", *QUIET, "model.num_heads=4"), sha)
    band = ReferenceBand(str(folder), run_key=changed)
    assert band.band is None and band.summary() == {"file": None, "note": band.note}
    assert (
        band.note == f"no reference band applies: this config differs from {folder / 'tiny.json'}'s in model.num_heads"
    )
    far = {**changed, "model.embedding_dim": 8, "optimizer.lr": 1.0, "data.batch_size": 2}
    assert ReferenceBand(str(folder), run_key=far).note == ""  # not a run of that config: nothing said


def test_a_step_whose_seeds_landed_together_by_chance_takes_its_neighbours_spread():
    from src.training.bands import bounds, spreads

    band = json.loads((ROOT / "conf" / "bands" / "default.json").read_text())["steps"]
    spread = spreads(band)
    assert band["1000"]["std"] < 0.002 and spread["1000"] == band["750"]["std"]  # 0.0015 between 0.012 and 0.009
    assert spread["0"] == band["0"]["std"] and spread["250"] == max(band[s]["std"] for s in ("250", "500"))
    low, _ = bounds(band["1000"]["mean"], spread["1000"])
    assert low < 1.8555  # seed 1337's val loss at step 1000, which 3 x 0.0015 called below the band
