"""What src/training/tensorboard.py writes, read back from the event files TensorBoard reads: one
TensorBoard run per training run, its curves told apart by tag, and the HPARAMS table's columns."""

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import plugin_data_pb2

from src.training.tensorboard import HPARAMS_METRICS, TensorBoard

PARAMS = {"model": {"num_heads": 4, "num_layers": 2, "kind": "gpt"}, "data": {"path": "input.txt"}, "seed": 1}


def read(folder) -> EventAccumulator:
    events = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    events.Reload()
    return events


def experiment(folder) -> plugin_data_pb2.HParamsPluginData:
    content = read(folder).SummaryMetadata("_hparams_/experiment").plugin_data.content
    return plugin_data_pb2.HParamsPluginData.FromString(content).experiment


def test_every_metric_is_a_tag_of_the_one_run_the_loss_group_first(tmp_path):
    """Issue 47: the val loss, the best val loss and each head index were runs of their own beside the run's
    events, 7 names in TensorBoard's runs list per training run."""
    logger = TensorBoard(tmp_path)
    for step in (0, 20):
        scores = {f"score_induction/L{i}H{h}": step + 10 * i + h for i in (0, 1) for h in (0, 1, 2)}
        metrics = {"train/loss": 4.5, "val/loss": 4.0 - step / 10, "best_val_loss": 3.0, "epoch": 0}
        logger.log_metrics({**scores, **metrics, "score_in_context/repeats": -0.5}, step)
    logger.finalize("success")
    assert not [p for p in (tmp_path / "tensorboard").iterdir() if p.is_dir()]  # no run beside it
    run = read(tmp_path / "tensorboard")
    scores = [f"score_induction/L{i}H{h}" for i in (0, 1) for h in (0, 1, 2)]
    assert sorted(run.Tags()["scalars"]) == sorted(
        ["loss/train", "loss/val", "loss/val_best", "score_in_context/repeats", *scores]
    )  # no epoch
    assert [(s.step, s.value) for s in run.Scalars("loss/val")] == [(0, 4.0), (20, 2.0)]
    assert [(s.step, s.value) for s in run.Scalars("loss/val_best")] == [(0, 3.0), (20, 3.0)]
    assert [(s.step, s.value) for s in run.Scalars("score_induction/L1H2")] == [(0, 12.0), (20, 32.0)]


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
