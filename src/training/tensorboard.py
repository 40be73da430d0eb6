"""What TensorBoard shows a run, arranged so that the loss is the first thing on screen (docs/tensorboard.md
says why each choice): the loss curves are the tag group `loss`, which sorts first; one training run is
one TensorBoard run, its curves told apart by tag (a chart each), so the runs list names runs, not parts
of them; the HPARAMS table lists the keys a run was given (or its parameter count) before the metric
columns, which stay on screen; each run names its row."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import lightning as L
from google.protobuf import struct_pb2
from lightning.pytorch.core.saving import save_hparams_to_yaml
from lightning.pytorch.loggers import TensorBoardLogger
from lightning.pytorch.utilities import rank_zero_only
from omegaconf import DictConfig, OmegaConf
from tensorboard.compat.proto.summary_pb2 import Summary, SummaryMetadata
from tensorboard.plugins.hparams import api_pb2, metadata, plugin_data_pb2
from tensorboard.summary.writer import event_file_writer

from src.data.tokenizer import printable
from src.training.callbacks import reported_validation

# The project's metric names -> the tags TensorBoard shows.
TAGS = {"train/loss": "loss/train", "val/loss": "loss/val", "best_val_loss": "loss/val_best"}
ATTENTION_TAG = "maps/attention_layer_{layer}"
# The HPARAMS tab's metric columns: (tag, run beside the session's own ("": its own), column title).
HPARAMS_METRICS = (
    ("loss/val_best", "", "best val loss"),
    ("val/bpc", "", "val bpc"),
    ("val/acc", "", "val accuracy"),
)
# The HPARAMS column of a run that was given no hyperparameter on its command line.
UNVARIED_COLUMNS = ("parameters",)


def trial_name(run_dir: str | Path, sweep_job: bool) -> str:
    """The run's row in the HPARAMS table (its Trial ID column is 10em wide): its folder (`17-26-00`), a
    sweep job's with its sweep's (`17-18-45/3`)."""
    path = Path(run_dir)
    return f"{path.parent.name}/{path.name}" if sweep_job else path.name


def shown_path(path: str | Path) -> str:
    """A path as a user would type it here: relative to the current folder when inside it."""
    absolute = Path(path).absolute()
    try:
        return str(absolute.relative_to(Path.cwd()))
    except ValueError:
        return str(absolute)


def watch_command(log_dir: str | Path, run_dir: str | Path | None = None) -> str:
    """The command that opens TensorBoard (without activating the venv; src/watch.py prints the address to
    open) on log_dir, or on run_dir when hydra.run.dir put the run outside it."""
    where = Path(log_dir)
    if run_dir is not None and not Path(run_dir).absolute().is_relative_to(where.absolute()):
        where = Path(run_dir)
    return f"{shown_path(sys.executable)} -m src.watch {shown_path(where)}"


def flatten(params: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"model": {"num_heads": 4}} -> {"model/num_heads": 4}, as the HPARAMS tab names keys."""
    flat: dict[str, Any] = {}
    for key, value in params.items():
        if isinstance(value, Mapping):
            flat.update(flatten(value, f"{prefix}{key}/"))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def hparams_summary(tag: str, **data: Any) -> Summary:
    """The HPARAMS plugin's record, built from TensorBoard's own protos (as torch's add_hparams does)."""
    content = plugin_data_pb2.HParamsPluginData(version=metadata.PLUGIN_DATA_VERSION, **data).SerializeToString()
    plugin = SummaryMetadata.PluginData(plugin_name=metadata.PLUGIN_NAME, content=content)
    return Summary(value=[Summary.Value(tag=tag, metadata=SummaryMetadata(plugin_data=plugin))])


def hparam_value(value: Any) -> float | str | bool:
    """What TensorBoard can show: numbers, strings and booleans; lists and None as text."""
    if isinstance(value, bool | str):
        return value
    return float(value) if isinstance(value, int | float) else str(value)


# An HPARAMS value's kind -> its field in a protobuf Value, its type in the experiment's columns.
PROTO_KINDS = {
    bool: ("bool_value", api_pb2.DATA_TYPE_BOOL),
    float: ("number_value", api_pb2.DATA_TYPE_FLOAT64),
    str: ("string_value", api_pb2.DATA_TYPE_STRING),
}


def quiet_writer_thread(args: threading.ExceptHookArgs) -> None:
    """TensorBoard's writer thread's error (a full disk) is raised again where the run logs next, and
    reported in one line there: not its traceback first."""
    if type(args.thread).__module__ != event_file_writer.__name__:
        threading.__excepthook__(args)


class TensorBoard(TensorBoardLogger):
    """Lightning's TensorBoardLogger with the project's tag names and HPARAMS entries."""

    def __init__(
        self,
        save_dir: str | Path,
        name: str | None = "tensorboard",
        version: int | str | None = "",
        log_graph: bool = False,
        default_hp_metric: bool = False,
        prefix: str = "",
        sub_dir: str | Path | None = None,
    ) -> None:
        # Without the parent's **kwargs (handed to SummaryWriter): a key typed as logger.<key> must be
        # one of these, or the pre-check refuses it, instead of SummaryWriter at the first event.
        super().__init__(save_dir, name, version, log_graph, default_hp_metric, prefix, sub_dir)
        threading.excepthook = quiet_writer_thread

    @rank_zero_only
    def log_metrics(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        # Without Lightning's `epoch`: training batches are one endless epoch here.
        renamed = {TAGS.get(name, name): value for name, value in metrics.items() if name != "epoch"}
        if renamed:
            super().log_metrics(renamed, step)

    @rank_zero_only
    def log_session(self, params: Mapping[str, Any], varied: Iterable[str] = (), trial: str = "") -> None:
        """Enter the run in the HPARAMS tab with every value of `params`, as the row `trial`. Its columns
        are the keys in `varied` (dotted, as typed), marked as differing, or else `parameters`: the table
        shows five before the metrics. Not Lightning's log_hyperparams, which can mark no column and
        writes a metric value at step 0: the metric columns read their tags' last values."""
        flat = {key: hparam_value(value) for key, value in flatten(params).items()}
        marked = {key.replace(".", "/") for key in varied}
        columns = sorted(name for name in flat if name in marked) or [name for name in UNVARIED_COLUMNS if name in flat]
        infos = [
            api_pb2.HParamInfo(name=name, type=PROTO_KINDS[type(flat[name])][1], differs=name in marked)
            for name in columns
        ]
        metrics = [
            api_pb2.MetricInfo(name=api_pb2.MetricName(tag=tag, group=run), display_name=title)
            for tag, run, title in HPARAMS_METRICS
        ]
        experiment = api_pb2.Experiment(hparam_infos=infos, metric_infos=metrics, time_created_secs=time.time())
        start = plugin_data_pb2.SessionStartInfo(group_name=trial, start_time_secs=time.time())
        for name, value in flat.items():
            start.hparams[name].CopyFrom(struct_pb2.Value(**{PROTO_KINDS[type(value)][0]: value}))
        writer = self.experiment.file_writer  # SummaryWriter's public FileWriter
        writer.add_summary(hparams_summary(metadata.EXPERIMENT_TAG, experiment=experiment))
        writer.add_summary(hparams_summary(metadata.SESSION_START_INFO_TAG, session_start_info=start))
        writer.flush()
        self.hparams.update(params)  # hparams.yaml holds them too (Lightning writes it only once, early)
        save_hparams_to_yaml(Path(self.log_dir) / self.NAME_HPARAMS_FILE, self.hparams)

    @rank_zero_only
    def log_text_sample(self, tag: str, text: str, step: int) -> None:
        """Indented four spaces: preformatted text, line breaks kept; a lone \\r (which would end the block)
        and other controls shown escaped."""
        self.experiment.add_text(tag, "    " + printable(text).replace("\n", "\n    "), global_step=step)

    @rank_zero_only
    def log_picture(self, tag: str, image: Any, step: int) -> None:
        self.experiment.add_image(tag, image, step, dataformats="HWC")


def hparams_of(cfg: DictConfig, num_parameters: int, varied: list[str]) -> dict[str, Any]:
    """The knobs worth comparing across runs in TensorBoard's HPARAMS tab, and the keys in `varied`."""
    opt = cfg.optimizer
    params: dict[str, Any] = {
        **{f"model/{k}": v for k, v in OmegaConf.to_container(cfg.model, resolve=True).items()},
        **{f"optimizer/{k}": opt[k] for k in ("name", "lr", "weight_decay", "warmup_steps", "min_lr")},
        **{f"data/{k}": cfg.data[k] for k in ("batch_size", "path", "val_tokens", "sampling")},
        "trainer/max_steps": cfg.trainer.max_steps,
        "trainer/precision": str(cfg.trainer.precision),
        "seed": cfg.seed,
        "parameters": num_parameters,
    }
    for key in varied:  # a swept key outside the list above, e.g. trainer.gradient_clip_val
        value = OmegaConf.select(cfg, key)
        if not isinstance(value, DictConfig):  # a group choice (model=seed) shows through its keys
            params.setdefault(key.replace(".", "/"), value)
    return params


class LogHyperparams(L.Callback):
    """The run's HPARAMS entry, written at its first validation (step 0's when there is one), so the tab
    lists a run as soon as it has a val loss."""

    def __init__(self, params: Mapping[str, Any], varied: Iterable[str] = (), trial: str = ""):
        self.params, self.varied, self.trial, self.logged = params, list(varied), trial, False

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.logged or not reported_validation(trainer):
            return
        for logger in trainer.loggers:
            if hasattr(logger, "log_session"):  # TensorBoard's HPARAMS; the other loggers' params (loggers.py)
                logger.log_session(self.params, self.varied, self.trial)
        self.logged = True
