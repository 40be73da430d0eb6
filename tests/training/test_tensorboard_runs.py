"""What src/training/tensorboard.py writes, read back from the event files TensorBoard reads:
a run per head for the head scores (a colour per head), the val loss in a run of its own (a colour
of its own beside the train loss in CUSTOM SCALARS) and the HPARAMS table's columns."""

import re

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.custom_scalar import layout_pb2
from tensorboard.plugins.hparams import plugin_data_pb2
from tensorboard.util import tensor_util

from src.training.tensorboard import HPARAMS_METRICS, TensorBoard

PARAMS = {"model": {"num_heads": 4, "num_layers": 2, "kind": "gpt"}, "data": {"path": "input.txt"}, "seed": 1}


def read(folder) -> EventAccumulator:
    events = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    events.Reload()
    return events


def experiment(folder) -> plugin_data_pb2.HParamsPluginData:
    content = read(folder).SummaryMetadata("_hparams_/experiment").plugin_data.content
    return plugin_data_pb2.HParamsPluginData.FromString(content).experiment


def test_head_scores_go_to_a_run_per_head_the_val_and_best_val_loss_to_theirs_and_the_rest_stays(tmp_path):
    logger = TensorBoard(tmp_path)
    for step in (0, 20):
        scores = {f"score_induction/L{i}H{h}": step + 10 * i + h for i in (0, 1) for h in (0, 1, 2)}
        metrics = {"val/loss": 4.0 - step / 10, "best_val_loss": 3.0, "score_in_context/repeats": -0.5, "epoch": 0}
        logger.log_metrics({**scores, **metrics}, step)
    logger.finalize("success")
    run = read(tmp_path / "tensorboard")
    assert sorted(run.Tags()["scalars"]) == ["score_in_context/repeats"]  # no epoch, no head's score
    val = read(tmp_path / "tensorboard" / "val")  # the val loss: a run of its own, as `loss/val`
    assert val.Tags()["scalars"] == ["loss/val"]
    assert [(s.step, s.value) for s in val.Scalars("loss/val")] == [(0, 4.0), (20, 2.0)]
    beside = sorted(p.name for p in (tmp_path / "tensorboard").iterdir() if p.is_dir())
    assert beside == ["best", "head_0", "head_1", "head_2", "val"]  # H runs for the L x H heads
    best = read(tmp_path / "tensorboard" / "best")  # the best so far: a line of its own in the loss/val chart
    assert [(s.step, s.value) for s in best.Scalars("loss/val")] == [(0, 3.0), (20, 3.0)]
    head_2 = read(tmp_path / "tensorboard" / "head_2")
    assert sorted(head_2.Tags()["scalars"]) == ["score_induction/layer_0", "score_induction/layer_1"]
    assert [(s.step, s.value) for s in head_2.Scalars("score_induction/layer_1")] == [(0, 12.0), (20, 32.0)]


def test_each_line_of_the_custom_scalars_loss_chart_is_a_run_of_its_own(tmp_path):
    """Issue 36: TensorBoard's CUSTOM SCALARS tab drew train and val loss in one colour, told apart by
    their markers only. Its multiline chart colours a line by its run (a series is `<tag> (<run>)`,
    coloured by the run), so every line of the chart must come from a different run."""
    logger = TensorBoard(tmp_path)
    for step in (0, 20):
        logger.log_metrics({"train/loss": 4.5 - step / 20, "val/loss": 4.0 - step / 10, "best_val_loss": 3.0}, step)
    logger.log_layout()
    logger.finalize("success")
    config = read(tmp_path / "tensorboard").Tensors("custom_scalars__config__")[0].tensor_proto
    layout = layout_pb2.Layout.FromString(tensor_util.make_ndarray(config).item())
    (chart,) = [c for category in layout.category for c in category.chart if c.title == "train and val loss"]
    runs = [tmp_path / "tensorboard", *sorted(p for p in (tmp_path / "tensorboard").iterdir() if p.is_dir())]
    lines = {  # run -> the tags of it that the chart draws
        run.name: [tag for tag in read(run).Tags()["scalars"] if any(re.search(r, tag) for r in chart.multiline.tag)]
        for run in runs
    }
    drawn = {run: tags for run, tags in lines.items() if tags}
    assert drawn == {"tensorboard": ["loss/train"], "val": ["loss/val"], "best": ["loss/val"]}  # a colour each


@pytest.mark.parametrize(
    ("varied", "columns"),
    [
        ([], ["parameters"]),  # a plain `make train`: the model's size, then the metrics
        (["experiment"], ["parameters"]),  # a preset: a group choice, no single key to show
        (["seed", "model.num_heads"], ["model/num_heads", "seed"]),  # a sweep: its swept keys only
    ],
)
def test_the_hparams_table_lists_the_varied_keys_or_the_size_so_the_metrics_stay_on_screen(tmp_path, varied, columns):
    logger = TensorBoard(tmp_path)
    logger.log_session({**PARAMS, "parameters": 12345}, varied, trial="12-00-00")
    logger.finalize("success")
    listed = experiment(tmp_path / "tensorboard")
    # TensorBoard shows the first five hyperparameters, then the metrics: constants no longer fill them
    assert [info.name for info in listed.hparam_infos] == columns
    assert all(info.differs == (info.name != "parameters") for info in listed.hparam_infos)
    assert [(m.name.tag, m.name.group, m.display_name) for m in listed.metric_infos] == list(HPARAMS_METRICS)
    content = read(tmp_path / "tensorboard").SummaryMetadata("_hparams_/session_start_info").plugin_data.content
    start = plugin_data_pb2.HParamsPluginData.FromString(content).session_start_info
    assert start.group_name == "12-00-00" and start.hparams["model/num_layers"].number_value == 2  # every value kept
    assert start.hparams["data/path"].string_value == "input.txt"
