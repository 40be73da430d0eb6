"""The trackers beside TensorBoard, a wing, each chosen by one override (docs/export.md, "Loggers"):
logger=csv, mlflow, wandb (offline, `.[trackers]`), or many (all at once; `~logger.wandb` leaves one out).

Each takes what src/training/tensorboard.py's TensorBoard takes: the metrics under its names, the run's
hyperparameters with the keys it varies (log_session), text samples and pictures. Each takes only the keys
of its signature, so the pre-check refuses a misspelt `logger.<key>`, and none writes before the run starts.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
from hydra.utils import get_class, instantiate
from lightning.pytorch.loggers import CSVLogger, Logger, MLFlowLogger, WandbLogger
from lightning.pytorch.loggers.logger import rank_zero_experiment
from lightning.pytorch.utilities import rank_zero_only
from omegaconf import DictConfig

from src.rules import ConfigError, unknown_key
from src.training.tensorboard import TAGS, flatten, shown_path

HYDRA_KEYS = ("_target_", "_partial_", "_recursive_", "_convert_", "_args_")


def renamed(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """TensorBoard's names for the project's metrics, and no `epoch` (one endless epoch here)."""
    return {TAGS.get(name, name): value for name, value in metrics.items() if name != "epoch"}


def session_params(params: Mapping[str, Any], varied: Iterable[str], trial: str) -> dict[str, Any]:
    """The HPARAMS entry as flat parameters: `model/num_heads`, plus the swept keys and the trial's name."""
    flat = {key: value if isinstance(value, (int, float, str, bool)) else str(value) for key, value in params.items()}
    flat = flatten(flat)
    return {**flat, "varied": ",".join(varied), "trial": trial}


def step_name(step: int) -> str:
    return f"step_{step:06d}"


class Renamed(Logger):
    """A logger that takes the metrics under TensorBoard's names."""

    @rank_zero_only
    def log_metrics(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        super().log_metrics(renamed(metrics), step)


class CSV(Renamed, CSVLogger):
    """metrics.csv (a row per logged step), hparams.yaml, and the samples and maps as files beside them."""

    def __init__(
        self,
        save_dir: str | Path,
        name: str = "csv",
        version: str | None = "",
        prefix: str = "",
        flush_logs_every_n_steps: int = 100,
    ) -> None:
        super().__init__(save_dir, name, version, prefix, flush_logs_every_n_steps)

    def metrics_line(self) -> str:
        """Where the run's metrics went, said when it ends (src/run/finish.py)."""
        return f"metrics (logger=csv): {shown_path(Path(self.log_dir) / 'metrics.csv')}, a row per logged step"

    @rank_zero_only
    def log_session(self, params: Mapping[str, Any], varied: Iterable[str] = (), trial: str = "") -> None:
        self.log_hyperparams(session_params(params, varied, trial))
        self.save()  # hparams.yaml now, not at the next flush

    @rank_zero_only
    def log_text_sample(self, tag: str, text: str, step: int) -> None:
        folder = Path(self.log_dir) / tag
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{step_name(step)}.txt").write_text(text, encoding="utf-8")

    @rank_zero_only
    def log_picture(self, tag: str, image: np.ndarray, step: int) -> None:
        import matplotlib.image

        folder = Path(self.log_dir) / Path(tag).parent
        folder.mkdir(parents=True, exist_ok=True)
        matplotlib.image.imsave(folder / f"{Path(tag).name}_{step_name(step)}.png", image)


def sweep_dir() -> Path | None:
    """The sweep directory when this process runs a sweep's job (Hydra's multirun), else None."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if not HydraConfig.initialized() or HydraConfig.get().mode != RunMode.MULTIRUN:
        return None
    return Path(HydraConfig.get().sweep.dir)


def mlflow_store(store: Path) -> dict[str, str]:
    """The SQLite store and the artifact folder of an MLflow store folder."""
    return {
        "tracking_uri": f"sqlite:///{store.absolute() / 'mlflow.db'}",
        "artifact_location": (store.absolute() / "artifacts").as_uri(),
    }


def create_sweep_store(config: DictConfig) -> None:
    """A sweep logging to MLflow: its one store and experiment, made before any job starts. Parallel jobs
    that each created the fresh SQLite store raced in MLflow's schema migration, and one failed."""
    logger = config.get("logger") or {}
    mlflow = logger if logger.get("_target_") == "src.trackers.MLflow" else logger.get("mlflow")
    if not mlflow:
        return
    from mlflow.tracking import MlflowClient

    store = Path(config.hydra.sweep.dir) / "mlflow"
    store.mkdir(parents=True, exist_ok=True)
    where = mlflow_store(store)
    client = MlflowClient(tracking_uri=where["tracking_uri"])
    if client.get_experiment_by_name(mlflow.experiment_name) is None:
        client.create_experiment(mlflow.experiment_name, artifact_location=where["artifact_location"])


class MLflow(Renamed, MLFlowLogger):
    """An MLflow run in a SQLite store under the run directory, or under the sweep directory for a
    sweep's jobs, so that one store holds the whole sweep; metrics_line says what reads it."""

    def __init__(
        self,
        save_dir: str | Path,
        experiment_name: str = "scratchgpt",
        run_name: str | None = None,
        version: str | None = None,
        prefix: str = "",
        synchronous: bool | None = True,
    ) -> None:
        self.store = (sweep_dir() or Path(save_dir)) / "mlflow"
        super().__init__(
            experiment_name=experiment_name,
            run_name=run_name or version or Path(save_dir).name,  # a sweep job: its swept values
            **mlflow_store(self.store),
            prefix=prefix,
            synchronous=synchronous,
        )

    def metrics_line(self) -> str:
        """Where the run's metrics went and what reads them with the trackers extra, said when it ends."""
        uri = f"sqlite:///{shown_path(self.store / 'mlflow.db')}"
        return (
            f"metrics (logger=mlflow): MlflowClient(tracking_uri={uri!r}) reads them; "
            f"mlflow ui --backend-store-uri {uri} after pip install mlflow (docs/export.md)"
        )

    @property
    @rank_zero_experiment
    def experiment(self) -> Any:  # MlflowClient
        self.store.mkdir(parents=True, exist_ok=True)  # only now: the pre-check builds the logger too
        return super().experiment  # a sweep's store and experiment exist already (create_sweep_store)

    @rank_zero_only
    def log_session(self, params: Mapping[str, Any], varied: Iterable[str] = (), trial: str = "") -> None:
        flat = session_params(params, varied, trial)
        self.log_hyperparams({k: v for k, v in flat.items() if k not in ("varied", "trial")})
        self.experiment.set_tag(self.run_id, "varied", flat["varied"])
        self.experiment.set_tag(self.run_id, "trial", trial)

    @rank_zero_only
    def log_text_sample(self, tag: str, text: str, step: int) -> None:
        self.experiment.log_text(self.run_id, text, f"{tag}/{step_name(step)}.txt")

    @rank_zero_only
    def log_picture(self, tag: str, image: np.ndarray, step: int) -> None:
        self.experiment.log_image(self.run_id, image, key=tag.replace("/", "."), step=step)


class WandB(Renamed, WandbLogger):
    """A Weights & Biases run kept offline in <run dir>/wandb: `wandb sync <run dir>/wandb/offline-run-*`
    uploads it later, from a machine with an account, if you want it on the web at all."""

    def __init__(
        self,
        save_dir: str | Path,
        project: str = "scratchgpt",
        name: str | None = None,
        version: str | None = None,
        offline: bool = True,
        prefix: str = "",
    ) -> None:
        if not offline:
            raise ConfigError(
                "offline=false is not offered: runs stay on this machine; upload one later with wandb sync"
            )
        os.environ.setdefault("WANDB_MODE", "offline")
        super().__init__(
            name=name or version or Path(save_dir).name,
            save_dir=str(save_dir),
            offline=True,
            project=project,
            prefix=prefix,
            settings={"mode": "offline", "silent": True, "x_disable_stats": True},
        )

    @rank_zero_only
    def log_session(self, params: Mapping[str, Any], varied: Iterable[str] = (), trial: str = "") -> None:
        self.experiment.config.update(session_params(params, varied, trial), allow_val_change=True)

    @rank_zero_only
    def log_text_sample(self, tag: str, text: str, step: int) -> None:
        self.log_text(key=tag, columns=["step", "text"], data=[[step, text]], step=step)

    @rank_zero_only
    def log_picture(self, tag: str, image: np.ndarray, step: int) -> None:
        self.log_image(key=tag, images=[image], step=step)


def many(version: str | None = None, **loggers: Any) -> list[Logger]:
    """logger=many: each of `loggers` ({name: its config}) built with the run's version."""
    built = []
    for name, spec in loggers.items():
        if spec is None:
            continue
        if not isinstance(spec, (DictConfig, dict)) or "_target_" not in spec:
            raise ConfigError(f"logger.{name} has no _target_: give a logger's config, or leave it out: ~logger.{name}")
        cls = get_class(spec["_target_"])
        options = inspect.signature(cls).parameters
        unknown = [k for k in spec if k not in HYDRA_KEYS and k not in options]
        if unknown:
            unknown_key(f"logger.{name}.{unknown[0]}", cls.__name__, [o for o in options if o != "version"])
        built.append(instantiate(spec, version=version))
    return built
