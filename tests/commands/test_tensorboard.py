"""TensorBoard shows what the model learned: scalars, text samples, attention maps, hyperparameters."""

import math
import struct

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import plugin_data_pb2
from tensorboard.util import tensor_util

from src.plots import BAR, CELL, DPI, TITLE
from tests.helpers import run_cli, run_main, scalars, tiny_training

pytestmark = pytest.mark.slow  # trainings, end to end (make test-fast skips them)

VALIDATIONS = [20, 40]  # the tiny run validates every 20 of its 40 steps
LAYERS, HEADS = 2, 2


def events(run_dir):
    """The run's events: one TensorBoard run."""
    accumulator = EventAccumulator(
        str(run_dir / "tensorboard"), size_guidance={"scalars": 0, "images": 0, "tensors": 0}
    )
    accumulator.Reload()
    return accumulator


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_the_first_group_on_screen_is_the_loss_and_both_curves_start_at_step_0(trained):
    accumulator = events(trained[0])
    tags = accumulator.Tags()
    shown = set(tags["scalars"]) | set(tags["images"])
    assert min(tag.split("/")[0] for tag in shown) == "loss"  # TIME SERIES lists groups in code-point order
    assert {"loss/train", "loss/val", "train/lr", "train/grad_norm", "val/bpc", "val/acc"} <= shown
    assert "epoch" not in shown and "hp_metric" not in shown
    untrained = math.log(65)  # uniform over Tiny Shakespeare's 65 characters
    for tag in ("loss/train", "loss/val"):
        first = accumulator.Scalars(tag)[0]
        assert first.step == 0 and first.value == pytest.approx(untrained, abs=0.3), tag
    assert [s.step for s in accumulator.Scalars("loss/val")] == [0, *VALIDATIONS]
    assert not [p for p in (trained[0] / "tensorboard").iterdir() if p.is_dir()]  # one TensorBoard run (issue 47)


def test_the_best_val_loss_is_the_running_minimum_of_real_validations(trained):
    val = {s.step: s.value for s in events(trained[0]).Scalars("loss/val")}
    best = scalars(trained[0])["loss/val_best"]
    assert [step for step, _ in best] == VALIDATIONS  # none at step 0: no checkpoint holds the untrained model
    for step, value in best:
        assert value == pytest.approx(min(v for k, v in val.items() if 0 < k <= step))


def test_a_text_sample_at_every_validation_from_step_0(trained):
    samples = events(trained[0]).Tensors("samples/text_summary")
    assert [s.step for s in samples] == [0, *VALIDATIONS]  # from step 0, where the curves start
    text = tensor_util.make_ndarray(samples[-1].tensor_proto).item().decode()
    assert text.startswith("    First Citizen:") and len(text) > 200  # preformatted: four-space indent


def test_one_attention_image_per_layer_at_every_validation_from_step_0(trained):
    accumulator = events(trained[0])
    for layer in range(LAYERS):
        images = accumulator.Images(f"maps/attention_layer_{layer}")
        assert [i.step for i in images] == [0, *VALIDATIONS]  # from step 0, where the curves start
        assert png_size(images[-1].encoded_image_string) == ((HEADS * CELL + BAR) * DPI, (CELL + TITLE) * DPI)
    assert "maps/attention_layer_2" not in accumulator.Tags()["images"]


def hparams_plugin(accumulator, tag):
    content = accumulator.SummaryMetadata(f"_hparams_/{tag}").plugin_data.content
    return plugin_data_pb2.HParamsPluginData.FromString(content)


def test_hparams_lead_with_the_keys_the_command_line_set_beside_best_val_loss_bpc_and_accuracy(trained):
    run_dir, _ = trained
    accumulator = events(run_dir)
    hparams = hparams_plugin(accumulator, "session_start_info").session_start_info.hparams
    assert {"model/num_heads", "model/embedding_dim", "model/context_window", "optimizer/lr", "parameters"} <= set(
        hparams
    )
    assert hparams["model/num_heads"].number_value == HEADS
    experiment = hparams_plugin(accumulator, "experiment").experiment
    assert [(m.name.tag, m.name.group, m.display_name) for m in experiment.metric_infos] == [
        ("loss/val_best", "", "best val loss"),
        ("val/bpc", "", "val bpc"),
        ("val/acc", "", "val accuracy"),
    ]
    marked = [h.name for h in experiment.hparam_infos if h.differs]
    # tiny_training's keys, less where the run goes and how it prints (paths, progress_bar, sample)
    assert marked[:3] == ["data/batch_size", "data/path", "data/val_fraction"] and "model/num_heads" in marked
    assert not any(name.startswith(("paths/", "progress_bar", "sample/")) for name in marked)
    # Only what the command line set: constants would fill the five columns shown before the metrics
    assert all(h.differs for h in experiment.hparam_infos) and "data/sampling" not in marked
    assert hparams_plugin(accumulator, "session_start_info").session_start_info.group_name == run_dir.name
    saved = (run_dir / "tensorboard" / "hparams.yaml").read_text()
    assert "model/num_heads: 2" in saved  # not Lightning's empty file
    assert not (run_dir / ".lock").exists()  # the lock goes with the run that held it


def test_a_seeded_sweep_shows_its_swept_keys_first_and_names_each_row_by_sweep_and_job(tmp_path):
    sweep = tmp_path / "multirun" / "2026-11-23" / "17-18-45"  # where Hydra puts a sweep under outputs/
    fast = ["model.num_layers=1", "trainer.max_steps=4", "trainer.val_check_interval=4"]
    args = tiny_training(tmp_path, *fast, f"hydra.sweep.dir={sweep}")
    result = run_main("train", "-m", *args, "model.embedding_dim=16,32", "seed=1,2")
    assert result.returncode == 0, result.stderr[-3000:]
    swept = [(16, 1), (16, 2), (32, 1), (32, 2)]
    for job, (dim, seed) in enumerate(swept):
        (run,) = (sweep / str(job) / "tensorboard").iterdir()
        assert run.name == f"embedding_dim={dim},seed={seed}"  # the run selector's name ends in the swept values
        accumulator = EventAccumulator(str(run))
        accumulator.Reload()
        start = hparams_plugin(accumulator, "session_start_info").session_start_info
        # The Trial ID column (10em) shows the group's name whole: not `multirun/2026-1...`
        assert start.group_name == f"17-18-45/{job}" and len(start.group_name) <= 16
        assert start.hparams["model/embedding_dim"].number_value == dim and start.hparams["seed"].number_value == seed
        infos = hparams_plugin(accumulator, "experiment").experiment.hparam_infos
        assert [h.name for h in infos if h.differs] == ["model/embedding_dim", "seed"]  # the columns shown first
        assert [h.name for h in infos] == ["model/embedding_dim", "seed"]  # then the metrics, on screen
    # summary.md's tokens/s is the whole run's, named so beside the validation lines' latest interval
    summary = (sweep / "summary.md").read_text()
    assert "| tokens/s (run) |" in summary
    # What each job's heads became, and their means over the seeds (src/training/heads.py's result.json)
    assert "| heads of each kind | best induction | in-context |" in summary
    assert summary.count("| prev ") == 4 and "mean best induction" in summary


def test_plot_attention_writes_the_figure_for_any_prompt(trained, tmp_path):
    run_dir, _ = trained
    out = tmp_path / "attention.png"
    result = run_cli(
        "plot_attention", f"ckpt_path={run_dir}", "prompt='To be, or not'", f"out={out}"
    )  # the process, once
    assert result.returncode == 0, result.stderr
    assert png_size(out.read_bytes()) == ((HEADS * CELL + BAR) * DPI, (LAYERS * CELL + TITLE) * DPI)
    beside = run_main("plot_attention", f"ckpt_path={run_dir}")  # no out=: into the run, not the project root
    assert beside.returncode == 0, beside.stderr
    assert beside.stdout.strip() == str(run_dir / "attention.png") and (run_dir / "attention.png").is_file()


def test_the_progress_bar_shows_loss_and_tokens_per_second_only_when_asked(tmp_path):
    shown = run_main(
        "train", *tiny_training(tmp_path, "progress_bar=true", "trainer.max_steps=30", "sample.max_new_tokens=0")
    )
    assert shown.returncode == 0, shown.stderr[-2000:]
    bar = shown.stdout + shown.stderr
    assert "loss=" in bar and "tokens/s=" in bar and "v_num" not in bar
    quiet = run_main(
        "train", *tiny_training(tmp_path, "trainer.max_steps=20", "sample.max_new_tokens=0", "progress_bar=auto")
    )
    assert quiet.returncode == 0 and "tokens/s=" not in quiet.stdout + quiet.stderr  # not a terminal: no bar
