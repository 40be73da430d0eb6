"""`python -m src.train [overrides]`: train, validate, checkpoint, log to TensorBoard, print a sample.

The recipe of lightning-hydra-template's train(): plan, build, fit, report. The command line's `check`
plans and builds before Hydra creates the run directory, so bad input is refused with nothing written;
a sweep's job, or a config composed in Python, is planned and built inside train()."""

# ruff: noqa: E402  (the imports follow the signal handler, so that it covers them too)
from __future__ import annotations

import signal

from src.training import STOP_SIGNALS, stop_outside_training

if __name__ == "__main__":  # a stop signal while the libraries load: one line, not a traceback
    for _signal in STOP_SIGNALS:
        signal.signal(_signal, stop_outside_training)

import logging
import os
import sys
import time
from contextlib import nullcontext
from pathlib import Path
from typing import NamedTuple

import src.training.lightning_import  # noqa: F401  (first: Lightning without scipy.signal)

# isort: split
import lightning as L
from lightning.pytorch.utilities import rank_zero_only
from omegaconf import DictConfig, OmegaConf

from src.data.datamodule import TextDataModule
from src.model.language_model import count_parameters
from src.rules import ConfigError
from src.run import preflight, record, rundir
from src.run.cli import command
from src.run.finish import raise_if_interrupted, report, run_name_and_keys, stops_in_one_line
from src.training.callbacks import GracefulInterrupt, progress_bar_shown
from src.training.flops import parameter_counts
from src.training.gpt_module import GPTModule
from src.training.optim import BASE_WIDTH, hidden_lr_scale
from src.training.tensorboard import LogHyperparams, hparams_of, trial_name

log = logging.getLogger(__name__)


class Run(NamedTuple):
    """What `python -m src.train` fits, each part built once from its config."""

    datamodule: TextDataModule
    module: GPTModule
    trainer: L.Trainer


def build(cfg: DictConfig, plan: preflight.Plan, module_class: type[GPTModule] = GPTModule) -> Run:
    """The run's objects from a config and its plan, by constructors only: nothing is trained or
    written. The benchmarks build here too (module_class: their variants)."""
    L.seed_everything(cfg.seed, workers=True, verbose=False)
    datamodule = plan.datamodule
    datamodule.setup("fit")  # splits the text the plan mapped (Lightning's own call is then free)
    lit = module_class(
        model=OmegaConf.to_container(cfg.model, resolve=True),
        tokenizer=plan.tokenizer.to_dict(),
        optimizer=OmegaConf.to_container(cfg.optimizer, resolve=True),
        data={**{k: cfg.data[k] for k in ("path", "val_fraction", "test_fraction")}, "sha256": plan.corpus.sha256},
    )
    name, varied = run_name_and_keys()
    trial = trial_name(cfg.paths.output_dir, record.in_multirun())
    hparams = LogHyperparams(hparams_of(cfg, count_parameters(lit.model), varied), varied, trial)
    shown = progress_bar_shown(cfg.progress_bar)
    callbacks = [*preflight.build_callbacks(cfg, plan.prompts, shown, plan.corpus.sha256), GracefulInterrupt(), hparams]
    # a sweep job is named by its overrides; False for ~logger (else Lightning adds one)
    logger = preflight.part("logger", cfg.logger, version=name) if cfg.logger is not None else False
    trainer = preflight.build_trainer(cfg, callbacks, logger, shown)
    if cfg.compile:
        lit.model.compile()  # in place: checkpoints keep the plain parameter names
    return Run(datamodule, lit, trainer)


Ready = tuple[preflight.Plan, Run]  # a run planned and built, not yet fitted


def plan_and_build(cfg: DictConfig, run_dir: str | Path, key: str) -> Ready:
    """Plan, check run_dir (`key` says where it is set), then build."""
    plan = preflight.plan(cfg)
    preflight.check_run_dir(cfg, plan.tokenizer.vocab_size, run_dir, key)  # before the model is built
    return plan, build(cfg, plan)


def train(cfg: DictConfig, ready: Ready | None = None) -> float:
    """Train as configured (ready: as check planned and built it); return the best validation loss."""
    started = time.time()
    where = "hydra.sweep.dir" if record.in_multirun() else "hydra.run.dir"
    plan, (datamodule, lit, trainer) = ready or plan_and_build(cfg, cfg.paths.output_dir, where)
    preflight.settle(cfg, plan.settled)  # a second composition of the command line (Hydra's) gets them too
    if rundir.launched_run() is not None and not record.in_multirun():  # torchrun's ranks: started alike?
        from src.cluster.meeting import meet

        meet(cfg)  # before Lightning forms the process group
    run_dir = Path(cfg.paths.output_dir)
    if trainer.is_global_zero:
        n = count_parameters(lit.model)
        log.info(
            f"{cfg.model.kind}: {f'{n / 1e6:.2f}M' if n >= 100_000 else f'{n:,}'} parameters | vocab "
            f"{plan.tokenizer.vocab_size} | {plan.corpus.source.name}: {datamodule.describe()} | {trainer.max_steps} "
            f"steps of {cfg.data.batch_size}x{cfg.model.context_window} tokens | run dir {run_dir}"
        )
        if cfg.model.get("scale") is not None:
            m, lr = cfg.model, cfg.optimizer.lr * hidden_lr_scale(cfg.model)
            rate = f"AdamW's weight matrices at lr {lr:.3g} (optimizer.lr x {BASE_WIDTH}/{m.embedding_dim})"
            rate = rate if cfg.optimizer.name == "adamw" else f"optimizer={cfg.optimizer.name}'s rates as typed"
            log.info(f"model.scale={m.scale}: {m.num_layers} layers, d {m.embedding_dim}, {m.num_heads} heads; {rate}")
        if plan.budget is not None:
            for line in plan.budget.lines(parameter_counts(lit.model)):
                (log.warning if line.startswith("warning:") else log.info)(line)
        if plan.resume is not None:
            log.info(f"resuming from {plan.resume}")
    with rundir.hold_run_dir(run_dir) if trainer.is_global_zero else nullcontext():
        with stops_in_one_line(cfg, plan, trainer, started):
            trainer.fit(lit, datamodule=datamodule, ckpt_path=str(plan.resume) if plan.resume else None)
            raise_if_interrupted(cfg, trainer, lit, started)
            return report(cfg, plan, trainer, lit, started)


def check(cfg: DictConfig, argv: list[str]) -> Ready:
    """A single run planned and built before Hydra creates its directory (cfg.paths.output_dir),
    refusing bad input with nothing written: the folder, its lock and its earlier run first."""
    if any(a.startswith("hydra.job.chdir=") and a.split("=", 1)[1].lower() == "true" for a in argv):
        raise ConfigError(
            "hydra.job.chdir=true would run the training inside its run directory, where relative paths "
            "(data.path, ckpt_path) no longer point where you typed them: leave it false"
        )
    typed = rundir.typed_run_dir(argv)
    launched = rundir.launched_run()
    if launched is not None or os.environ.get("SLURM_NTASKS", "1") != "1":  # several ranks
        from src.cluster.meeting import check_launched_run  # ranks that could never meet, refused

        check_launched_run(launched, typed is not None)
    mine = typed is not None and rank_zero_only.rank == 0  # DDP's other ranks join the run rank 0 holds
    if mine:
        rundir.check_not_in_use(typed)
        if not cfg.overwrite:
            rundir.check_rerun(typed, cfg)
    ready = plan_and_build(cfg, typed or cfg.paths.log_dir, "hydra.run.dir" if typed else "paths.log_dir")
    preflight.check_typed_together(argv)  # after the values' own checks, still before anything is written
    if mine:
        rundir.take_run_dir(typed)
        if cfg.overwrite:  # the old run's files go, now that the directory is held
            rundir.check_rerun(typed, cfg)
    return ready


def task(cfg: DictConfig, ready: Ready | None = None) -> float | None:
    if record.in_multirun():
        from src.sweeps.job import run_job  # a sweep's job: skipped, resumed or contained as a sweep needs

        return run_job(cfg, train)
    return train(cfg, ready)


def check_point(cfg: DictConfig, point: list[str]) -> None:
    """A multirun's point, before the sweep starts: what its launcher can run (the sweeps wing, loaded then)."""
    from src.sweeps.checks import check_sweep_job

    preflight.check_typed_together(point)
    check_sweep_job(cfg, point)


def main() -> float | None:
    sys.argv[1:] = rundir.continue_run(sys.argv[1:])  # Hydra reads the command line from sys.argv
    return command("train", task, check=check, check_point=check_point)


if __name__ == "__main__":
    main()
