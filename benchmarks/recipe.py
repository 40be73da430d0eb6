"""The DataModule and LightningModule a benchmark measures, built by src/train.py's build() as
`python -m src.train` builds them, without the run around them."""

from __future__ import annotations

import tempfile

import lightning as L
from omegaconf import DictConfig

from src.data.datamodule import TextDataModule
from src.run import preflight
from src.run.cli import compose
from src.train import build
from src.training.gpt_module import GPTModule

OUTPUT_DIR = f"paths.output_dir={tempfile.gettempdir()}/benchmark-run"


def run_of(
    overrides: list[str], lit_class: type[GPTModule] = GPTModule
) -> tuple[DictConfig, TextDataModule, GPTModule, L.Trainer]:
    """The config of `python -m src.train seed=0 <overrides>` and the run build() makes of it."""
    cfg = compose("train", ["seed=0", OUTPUT_DIR, *overrides])
    datamodule, lit, trainer = build(cfg, preflight.plan(cfg), lit_class)
    return cfg, datamodule, lit, trainer


def data_and_model(
    overrides: list[str], lit_class: type[GPTModule] = GPTModule
) -> tuple[DictConfig, TextDataModule, GPTModule]:
    """The composed config of `python -m src.train seed=0 <overrides>`, its DataModule (set up) and model.

    The run's Trainer is built too (nothing is written before it fits), and left unused: each
    benchmark runs its own, without logging or checkpoints.
    """
    cfg, datamodule, lit, _ = run_of(overrides, lit_class)
    return cfg, datamodule, lit
