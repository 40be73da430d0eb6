"""`python -m src.train [overrides]`: train, validate, checkpoint, log to TensorBoard, print a sample."""

from __future__ import annotations

import logging
import math
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning as L
import torch
from hydra.utils import instantiate
from lightning.fabric.utilities.exceptions import MisconfigurationException
from omegaconf import DictConfig, OmegaConf

from src import sweeps
from src.cli import compose, fail, hydra_entry
from src.data.datamodule import ShakespeareDataModule
from src.data.tokenizer import CharTokenizer
from src.model.language_model import count_parameters
from src.model.sampling import sample_text
from src.training.callbacks import GracefulInterrupt, TokensPerSecond, TrainingInterrupted
from src.training.checkpoint import CheckpointError, find_checkpoint, load_trained, read_checkpoint
from src.training.checkpoint_io import AtomicCheckpointIO
from src.training.lit_gpt import LitGPT

log = logging.getLogger(__name__)


def show_progress_bar(setting: Any) -> bool:
    if setting == "auto":
        return sys.stderr.isatty() and not os.environ.get("CI")
    return bool(setting)


def check_accelerator(trainer_cfg: DictConfig) -> None:
    if trainer_cfg.accelerator in ("gpu", "cuda") and not torch.cuda.is_available():
        raise ValueError(
            "trainer=gpu asks for a GPU but none is available: use trainer=cpu, "
            "or trainer=default, which takes a GPU only when there is one"
        )


def check_optimizer(optimizer_cfg: DictConfig) -> None:
    if optimizer_cfg.name not in ("adamw", "sgd"):
        raise ValueError(f"optimizer.name must be adamw or sgd, got {optimizer_cfg.name!r}: use optimizer=adamw or sgd")
    if not optimizer_cfg.lr > 0:
        raise ValueError(f"optimizer.lr must be positive, got {optimizer_cfg.lr}")


def check_same_model(saved: dict[str, Any], requested: dict[str, Any], path: Path) -> None:
    """Resuming must rebuild the model that was saved."""
    for key in sorted(set(saved) | set(requested)):
        if key != "fused" and saved.get(key) != requested.get(key):
            raise ValueError(
                f"{path} was trained with model.{key}={saved.get(key)}, but the config says {requested.get(key)}: "
                f"resume with the run's own model options, or start a new run without ckpt_path"
            )


def tensorboard_hparams(cfg: DictConfig, num_parameters: int) -> dict[str, Any]:
    """The knobs worth comparing across runs in TensorBoard's HPARAMS tab."""
    opt = cfg.optimizer
    return {
        "model": OmegaConf.to_container(cfg.model, resolve=True),
        "optimizer": {k: opt[k] for k in ("name", "lr", "weight_decay", "warmup_steps", "min_lr")},
        "data": {"batch_size": cfg.data.batch_size, "path": str(cfg.data.path)},
        "trainer": {"max_steps": cfg.trainer.max_steps, "precision": str(cfg.trainer.precision)},
        "seed": cfg.seed,
        "parameters": num_parameters,
    }


@dataclass
class Setup:
    """Everything a run needs, built and checked before training starts."""

    datamodule: ShakespeareDataModule
    lit: LitGPT
    resume: Path | None


def set_up(cfg: DictConfig) -> Setup:
    """Check the config and build the data and model; raises ValueError naming the fix."""
    check_accelerator(cfg.trainer)
    check_optimizer(cfg.optimizer)
    model_cfg = OmegaConf.to_container(cfg.model, resolve=True)
    data_cfg = OmegaConf.to_container(cfg.data, resolve=True)
    resume, tokenizer = None, None
    if cfg.ckpt_path is not None:
        resume = find_checkpoint(cfg.ckpt_path, cfg.paths.log_dir, prefer="last")
        saved = read_checkpoint(resume)["hyper_parameters"]
        check_same_model(saved["model"], model_cfg, resume)
        tokenizer = CharTokenizer.from_dict(saved["tokenizer"])
    datamodule = ShakespeareDataModule(**data_cfg, tokenizer=tokenizer)
    datamodule.prepare_data()
    datamodule.setup("fit")
    lit = LitGPT(
        model=model_cfg,
        tokenizer=datamodule.tokenizer.to_dict(),
        optimizer=OmegaConf.to_container(cfg.optimizer, resolve=True),
        data={k: data_cfg[k] for k in ("path", "val_fraction", "test_fraction")},
    )
    return Setup(datamodule, lit, resume)


def check_writable(directory: str | Path) -> None:
    """The nearest existing folder of `directory` must take a new file (probed, then removed)."""
    path = Path(directory).expanduser().absolute()
    existing = next(p for p in [path, *path.parents] if p.exists())
    try:
        if not existing.is_dir():
            raise NotADirectoryError(f"{existing} is a file")
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as err:
        raise ValueError(
            f"cannot write the run to {path} ({err.strerror or err}): "
            f"choose a writable folder with paths.log_dir=... or hydra.run.dir=..."
        ) from None


def precheck(cfg: DictConfig, argv: list[str]) -> None:
    """Refuse a bad single run before Hydra creates its directory: nothing is written."""
    run_dirs = [a.split("=", 1)[1] for a in argv if a.startswith("hydra.run.dir=")]
    check_writable(run_dirs[-1] if run_dirs else cfg.paths.log_dir)
    set_up(cfg)


def train(cfg: DictConfig) -> float:
    """Train as configured; return the best validation loss (what sweepers minimise)."""
    started = time.time()
    L.seed_everything(cfg.seed, workers=True, verbose=False)
    setup = set_up(cfg)
    datamodule, lit, resume = setup.datamodule, setup.lit, setup.resume

    bar = show_progress_bar(cfg.progress_bar)
    callbacks = [
        instantiate(c) for name, c in cfg.callbacks.items() if c is not None and (bar or name != "progress_bar")
    ]
    logger = instantiate(cfg.logger, version=sweeps.run_name())  # sweep jobs: named by their overrides
    trainer: L.Trainer = instantiate(
        cfg.trainer,
        callbacks=[*callbacks, GracefulInterrupt()],
        logger=logger,
        enable_progress_bar=bar,
        plugins=[AtomicCheckpointIO()],
    )
    if cfg.compile:
        lit.model.compile()  # in place: checkpoints keep the plain parameter names
    num_parameters = count_parameters(lit.model)
    logger.log_hyperparams(tensorboard_hparams(cfg, num_parameters))

    if trainer.is_global_zero:
        log.info(
            f"{cfg.model.kind}: {num_parameters / 1e6:.2f}M parameters | vocab {datamodule.tokenizer.vocab_size} "
            f"| {datamodule.describe()} | {trainer.max_steps} steps of "
            f"{cfg.data.batch_size}x{cfg.model.context_window} tokens | run dir {cfg.paths.output_dir}"
        )
        if resume is not None:
            log.info(f"resuming from {resume}")
    try:
        trainer.fit(lit, datamodule=datamodule, ckpt_path=str(resume) if resume else None)
    except TrainingInterrupted as stop:
        status = 130 if stop.signal_name == "SIGINT" else 143
        fail(f"{stop}; resume with: python -m src.train ckpt_path={cfg.paths.output_dir}", status=status)
    checkpointing = trainer.checkpoint_callback
    best_path = getattr(checkpointing, "best_model_path", "") if checkpointing is not None else ""
    best_loss = lit.best_val_loss
    speed = next((c.overall for c in trainer.callbacks if isinstance(c, TokensPerSecond)), None)
    if trainer.is_global_zero:
        sweeps.write_result(
            cfg.paths.output_dir,
            {
                "status": "ok",
                "best_val_loss": best_loss,
                "best_val_bpc": best_loss / math.log(2),
                "parameters": num_parameters,
                "tokens_per_sec": speed,
                "steps": trainer.global_step,
                "wall_seconds": time.time() - started,
                "best_checkpoint": best_path,
            },
        )
    if trainer.is_global_zero and best_path:
        log.info(f"best val loss {best_loss:.4f} -> {best_path}")
        s = cfg.sample
        if s.max_new_tokens > 0:
            best = load_trained(best_path)
            sample = sample_text(
                best.model, best.tokenizer, s.prompt, s.max_new_tokens, s.temperature, s.top_k, s.top_p, seed=cfg.seed
            )
            log.info("sample:\n" + sample)
        log.info("watch it: tensorboard --logdir outputs")
    return best_loss


def continue_run(argv: list[str]) -> list[str]:
    """`ckpt_path=<run dir, its checkpoint, or last>` continues that run where it was saved.

    The run's own overrides (from its .hydra/overrides.yaml) come first, so the same model and
    settings are rebuilt; overrides typed now come after them and win (e.g. a larger
    trainer.max_steps). Output goes to the same run directory, so TensorBoard shows one curve.
    """
    given = [a for a in argv if a.startswith("ckpt_path=")]
    if not given or any(a in ("-m", "--multirun") or a.startswith("hydra.run.dir=") for a in argv):
        return argv
    spec = given[-1].split("=", 1)[1]
    if spec in ("null", ""):
        return argv
    log_dir = compose("train", [a for a in argv if not a.startswith("ckpt_path=")]).paths.log_dir
    try:
        checkpoint = find_checkpoint(spec, log_dir, prefer="last")
    except CheckpointError:
        return argv  # train() reports it
    run_dir = checkpoint.parent.parent
    saved = run_dir / ".hydra" / "overrides.yaml"
    if checkpoint.parent.name != "checkpoints" or not saved.is_file():
        return argv
    previous = [o for o in OmegaConf.load(saved) if not o.startswith(("ckpt_path=", "hydra."))]
    typed = [a for a in argv if not a.startswith("ckpt_path=")]
    latest = {o.split("=", 1)[0]: o for o in [*previous, *typed]}  # one entry per key, the last one wins
    return [*latest.values(), f"ckpt_path={checkpoint}", f"hydra.run.dir={run_dir}"]


@hydra_entry(
    config_name="train", rewrite_argv=continue_run, precheck=precheck, user_errors=(MisconfigurationException,)
)
def main(cfg: DictConfig) -> float | None:
    return sweeps.run_job(cfg, train) if sweeps.in_multirun() else train(cfg)


if __name__ == "__main__":
    main()
