"""Reference bands: where a run's val loss sits among seeds of the same config, so a bug is told from noise.

A band file (conf/bands/<preset>.json, written by `python -m benchmarks.bands experiment=<preset>`) holds,
for the config it was made with, the val loss at each validation step over k >= 5 seeds: mean, std (ddof 1),
min and max. A run is judged against mean +- 3 std: the min-max of 5 seeds would call about one run in
three of an unchanged config outside it (a sixth draw lands beyond the other five's extremes with
probability 2/6), and "check your change" must mean something.

A band applies to a run whose config is the band's apart from the seed and where it writes (`config_key`
reads the keys that decide the loss, the text by its sha256); `callbacks.band.file=<file>` compares with
that band whatever differs (the differences said once).
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.loggers import TensorBoardLogger
from omegaconf import DictConfig, OmegaConf

from src.rules import ConfigError
from src.training.callbacks import reported_validation
from src.training.tensorboard import shown_path

log = logging.getLogger(__name__)

# The data keys that do not change what is trained: where the text is and how validation is batched.
NOT_DECIDING_DATA = ("path", "cache_dir", "url", "sha256", "num_workers", "val_batch_size", "seed")
TRAINER_KEYS = ("max_steps", "val_check_interval", "precision", "gradient_clip_val", "accumulate_grad_batches")
WIDTH = 3.0  # the band: mean +- WIDTH std over the seeds (spreads: the std of a step and its neighbours)
NEAR = 3  # a band whose config differs in at most this many keys is named when it does not apply
# TensorBoard's CUSTOM SCALARS tab draws loss/val between band/low and band/high (a margin chart)
MARGIN_TAGS = ("loss/val", "band/low", "band/high")
MARGIN_TITLE = "loss/val inside the band of its seeds"


def config_key(cfg: DictConfig, text_sha256: str) -> dict[str, Any]:
    """The keys of a train config that decide its val loss curve, flat (`model.num_heads`), seed aside."""
    data = {k: v for k, v in OmegaConf.to_container(cfg.data, resolve=True).items() if k not in NOT_DECIDING_DATA}
    key: dict[str, Any] = {"data.text_sha256": text_sha256}
    for prefix, values in (
        ("model", OmegaConf.to_container(cfg.model, resolve=True)),
        ("optimizer", OmegaConf.to_container(cfg.optimizer, resolve=True)),
        ("data", data),
        ("trainer", {k: cfg.trainer.get(k) for k in TRAINER_KEYS}),
    ):
        key.update({f"{prefix}.{k}": v for k, v in values.items() if k != "_target_"})
    return json.loads(json.dumps(key, default=str))  # as a file holds it: lists, not tuples


def differences(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """The keys whose values differ between two config keys (missing on one side included)."""
    return sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))


def read_band(path: Path) -> dict[str, Any]:
    band = json.loads(Path(path).read_text())
    if not isinstance(band.get("steps"), dict) or not isinstance(band.get("config"), dict):
        raise ValueError("it has no steps or config")
    return band


def find_band(folder: Path, key: dict[str, Any]) -> tuple[Path | None, Path | None, list[str]]:
    """(the band file for this config or None, the nearest other, the keys it differs in)."""
    nearest: tuple[int, Path | None, list[str]] = (math.inf, None, [])
    for path in sorted(Path(folder).glob("*.json")):
        try:
            band = read_band(path)
        except (OSError, ValueError):
            continue
        differ = differences(band["config"], key)
        if not differ:
            return path, None, []
        if len(differ) < nearest[0]:
            nearest = (len(differ), path, differ)
    return None, nearest[1], nearest[2]


def spreads(steps: dict[str, dict[str, float]]) -> dict[str, float]:
    """The std each step's band is drawn with: the largest of its own and its neighbouring validations'
    (step 0, the untrained model, aside). Five seeds estimate a spread poorly: at the default's step 1000
    they landed within 0.003 of one another (std 0.0015, between 0.012 and 0.009 at its neighbours), and
    mean +- 3 x 0.0015 called an unchanged run of another seed below the band."""
    trained = sorted((s for s in steps if int(s) > 0), key=int)
    spread = {s: float(stats["std"]) for s, stats in steps.items()}
    for i, s in enumerate(trained):
        spread[s] = max(float(steps[t]["std"]) for t in trained[max(i - 1, 0) : i + 2])
    return spread


def bounds(mean: float, std: float) -> tuple[float, float]:
    return mean - WIDTH * std, mean + WIDTH * std


def judge(loss: float, low: float, high: float, seeds: int) -> tuple[str, str]:
    """("within" | "above" | "below", the line that says it), against the band low-high."""
    span = f"the band of {seeds} seeds, {low:.2f}-{high:.2f}"
    if loss > high:
        return "above", f"{loss:.4f}: above {span}: check your change"
    if loss < low:
        return "below", f"{loss:.4f}: below {span}: better than the seeds (a change worth a look)"
    return "within", f"{loss:.4f}, within {span}"


class ReferenceBand(L.Callback):
    """At each validation, where the val loss sits in the reference band of the run's config: a line,
    `band/low` and `band/high` in TensorBoard beside loss/val, and result.json's "band"."""

    def __init__(
        self,
        folder: str = "conf/bands",
        file: str | None = None,
        required: bool = False,
        run_key: dict[str, Any] | None = None,
    ):
        """run_key: the run's config_key (given by the run's plan)."""
        self.run_key = run_key or {}
        self.path, self.note, self.band = None, "", None
        if file is not None:
            self.path = Path(file)
            try:
                self.band = read_band(self.path)
            except (OSError, ValueError) as err:
                raise ConfigError(
                    f"callbacks.band.file={file} is not a band file ({err}): name a file of conf/bands/, or "
                    f"callbacks.band.file=null to find the band of this config there"
                ) from None
            differ = differences(self.band["config"], self.run_key)
            if differ:
                shown = shown_path(self.path)
                self.note = f"comparing with the band {shown}, whose config differs in {', '.join(differ)}"
        else:
            self.path, nearest, differ = find_band(Path(folder), self.run_key)
            if self.path is None and required:
                why = (
                    f"the nearest, {shown_path(nearest)}, differs in {', '.join(differ)}"
                    if nearest
                    else f"{folder} has none"
                )
                raise ConfigError(
                    f"callbacks.band.required=true but no reference band is made for this config ({why}): "
                    f"make one with python -m benchmarks.bands <the same overrides>, or callbacks.band.required=false"
                )
            if self.path is None and nearest is not None and len(differ) <= NEAR:
                shown = shown_path(nearest)
                self.note = f"no reference band applies: this config differs from {shown}'s in {', '.join(differ)}"
            self.band = read_band(self.path) if self.path is not None else None
        self.spread = spreads(self.band["steps"]) if self.band is not None else {}  # step -> the std drawn
        self.seen: dict[str, dict[str, Any]] = {}

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.note and trainer.is_global_zero:
            log.info(self.note)
        if self.band is not None and trainer.is_global_zero:  # loss/val drawn inside its band, one chart
            for logger in trainer.loggers:
                if isinstance(logger, TensorBoardLogger):
                    logger.experiment.add_custom_scalars_marginchart(list(MARGIN_TAGS), "band", MARGIN_TITLE)

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.band is None or not reported_validation(trainer) or not trainer.is_global_zero:
            return
        stats = self.band["steps"].get(str(trainer.global_step))
        loss = trainer.callback_metrics.get("val/loss")
        if stats is None or loss is None:
            return
        std = self.spread[str(trainer.global_step)]
        low, high = bounds(stats["mean"], std)
        where, line = judge(float(loss), low, high, len(self.band.get("seeds", [])) or stats.get("n", 0))
        self.seen[str(trainer.global_step)] = {"val_loss": float(loss), "low": low, "high": high, "where": where}
        log.info(f"step {trainer.global_step:>6} | band: {line}")
        for logger in trainer.loggers:
            logger.log_metrics({"band/low": low, "band/high": high}, step=trainer.global_step)

    def summary(self) -> dict[str, Any] | None:
        """result.json's "band": the file, and each validation's place in it."""
        if self.band is None:
            return {"file": None, "note": self.note} if self.note else None
        return {"file": str(self.path), "seeds": self.band.get("seeds"), "note": self.note, "steps": self.seen}
