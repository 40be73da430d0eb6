"""TensorBoard shows what the model learned: scalars, text samples, attention maps, hyperparameters."""

import struct

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import plugin_data_pb2
from tensorboard.util import tensor_util

from src.plots import CELL, DPI, TITLE
from tests.helpers import run_cli, tiny_training

pytestmark = pytest.mark.slow  # the commands as processes, end to end (make test-fast skips them)

VALIDATIONS = [20, 40]  # the tiny run validates every 20 of its 40 steps
LAYERS, HEADS = 2, 2


def events(run_dir):
    accumulator = EventAccumulator(
        str(run_dir / "tensorboard"), size_guidance={"scalars": 0, "images": 0, "tensors": 0}
    )
    accumulator.Reload()
    return accumulator


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_scalars_are_grouped_by_prefix(trained):
    tags = set(events(trained[0]).Tags()["scalars"])
    expected = {"train/loss", "train/lr", "train/grad_norm", "train/tokens_per_sec"}
    expected |= {"val/loss", "val/ppl", "val/bpc", "val/acc", "hp_metric"}
    assert expected <= tags


def test_a_text_sample_at_every_validation(trained):
    samples = events(trained[0]).Tensors("samples/text_summary")
    assert [s.step for s in samples] == VALIDATIONS
    text = tensor_util.make_ndarray(samples[-1].tensor_proto).item().decode()
    assert text.startswith("    First Citizen:") and len(text) > 200  # preformatted: four-space indent


def test_one_attention_image_per_layer_at_every_validation(trained):
    accumulator = events(trained[0])
    for layer in range(LAYERS):
        images = accumulator.Images(f"attention/layer_{layer}")
        assert [i.step for i in images] == VALIDATIONS
        assert png_size(images[-1].encoded_image_string) == (HEADS * CELL * DPI, (CELL + TITLE) * DPI)
    assert "attention/layer_2" not in accumulator.Tags()["images"]


def test_hyperparameters_are_compared_by_hp_metric(trained):
    accumulator = events(trained[0])
    start = accumulator.SummaryMetadata("_hparams_/session_start_info").plugin_data.content
    hparams = plugin_data_pb2.HParamsPluginData.FromString(start).session_start_info.hparams
    assert {"model/num_heads", "model/embedding_dim", "model/context_window", "optimizer/lr", "parameters"} <= set(
        hparams
    )
    assert hparams["model/num_heads"].number_value == HEADS
    best = min(v.value for v in accumulator.Scalars("val/loss"))
    assert accumulator.Scalars("hp_metric")[-1].value == best


def test_plot_attention_writes_the_figure_for_any_prompt(trained, tmp_path):
    run_dir, _ = trained
    out = tmp_path / "attention.png"
    result = run_cli("plot_attention", f"ckpt_path={run_dir}", "prompt='To be, or not'", f"out={out}")
    assert result.returncode == 0, result.stderr
    assert png_size(out.read_bytes()) == (HEADS * CELL * DPI, (LAYERS * CELL + TITLE) * DPI)


def test_the_progress_bar_shows_loss_and_tokens_per_second_only_when_asked(tmp_path):
    shown = run_cli(
        "train", *tiny_training(tmp_path, "progress_bar=true", "trainer.max_steps=30", "sample.max_new_tokens=0")
    )
    assert shown.returncode == 0, shown.stderr[-2000:]
    bar = shown.stdout + shown.stderr
    assert "loss=" in bar and "tokens/s=" in bar and "v_num" not in bar
    quiet = run_cli(
        "train", *tiny_training(tmp_path, "trainer.max_steps=20", "sample.max_new_tokens=0", "progress_bar=auto")
    )
    assert quiet.returncode == 0 and "tokens/s=" not in quiet.stdout + quiet.stderr  # not a terminal: no bar
