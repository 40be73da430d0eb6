"""The DataModule and LightningModule a benchmark measures, built as `python -m src.train` builds
them (src/train.py's recipe), without the run around them."""

from __future__ import annotations

import lightning as L
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from src import preflight
from src.cli import compose
from src.data.datamodule import ShakespeareDataModule
from src.training.lit_gpt import LitGPT


def data_and_model(
    overrides: list[str], lit_class: type[LitGPT] = LitGPT
) -> tuple[DictConfig, ShakespeareDataModule, LitGPT]:
    """The composed config of `python -m src.train <overrides>`, its DataModule (set up) and model."""
    cfg = compose("train", overrides)
    plan = preflight.plan(cfg)
    L.seed_everything(0, verbose=False)
    datamodule = instantiate(cfg.data, tokenizer=plan.tokenizer)
    datamodule.setup("fit")
    lit = lit_class(
        model=OmegaConf.to_container(cfg.model, resolve=True),
        tokenizer=plan.tokenizer.to_dict(),
        optimizer=OmegaConf.to_container(cfg.optimizer, resolve=True),
    )
    return cfg, datamodule, lit
