"""hydra/sweeper=optuna (hydra_plugins/scratchgpt_sweeper.py): an Optuna search through Optuna's public API.

Each worker process runs `study.optimize`, one trial at a time as a sweep job of its launcher, in
<sweep dir>/<trial number>, and asks for the next trial as soon as its last one ends. Workers given the
same `hydra.sweeper.storage` share one study: the storage numbers the trials, so their directories never
collide; `n_trials` counts every worker's trials; on a database, Optuna's heartbeat fails the trial of a
worker that died. The search space is Hydra's sweep syntax (choice, range, interval, tag(log, ...)),
read with Hydra's own override parser, as Hydra's Optuna sweeper read it."""

from __future__ import annotations

import logging
import math
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override, Transformer
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.callbacks import Callback
from omegaconf import DictConfig, OmegaConf

from src.run.record import read_result, write_record

log = logging.getLogger(__name__)

Suggest = Callable[[optuna.Trial], Any]  # draws one key's value for a trial


@dataclass
class Running:
    """The trial whose job runs in this process now, for PruneTrial; None in a parallel launcher's worker."""

    trial: optuna.Trial | None = None
    pruned_at: int | None = None  # the step at which the pruner stopped it


RUNNING = Running()


class PruneTrial(Callback):
    """Reports `monitor` at each validation to the running trial (its step: the global step) and stops the
    run when the study's pruner says so. Optuna-integration's PyTorchLightningPruningCallback reports at
    the epoch, and every validation of a max_steps run is in epoch 0; it also raises inside fit, which a
    sweep job records as a failure."""

    def __init__(self, monitor: str) -> None:
        self.monitor = monitor

    def on_validation_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        trial = RUNNING.trial
        if trainer.sanity_checking:
            return
        prune = False
        value = trainer.callback_metrics.get(self.monitor)
        if trial is not None and trainer.is_global_zero and value is not None:
            trial.report(float(value), step=trainer.global_step)
            prune = trial.should_prune()
        if trainer.strategy.reduce_boolean_decision(prune, all=False):  # a DDP job's ranks stop together
            trainer.should_stop = True
            if trainer.is_global_zero:
                RUNNING.pruned_at = trainer.global_step
                log.info(f"trial {trial.number if trial else '?'}: pruned at step {trainer.global_step}")


def suggestion(override: Override) -> Suggest:
    """A sweep override as the trial.suggest_* call that draws its value."""
    key, value = override.get_key_element(), override.value()
    if override.is_interval_sweep():  # Hydra reads an interval's ends as floats
        low, high, log_scale = value.start, value.end, "log" in value.tags
        return lambda trial: trial.suggest_float(key, low, high, log=log_scale)
    values = list(override.sweep_iterator(transformer=Transformer.encode))
    if override.is_range_sweep() and not value.shuffle and values:
        low, high, step = min(values), max(values), abs(value.step)
        if all(isinstance(v, int) for v in (low, high, step)):
            return lambda trial: trial.suggest_int(key, low, high, step=step)
        return lambda trial: trial.suggest_float(key, low, high, step=step)
    return lambda trial: trial.suggest_categorical(key, values)  # choice, or a shuffled range


def search_space(params: DictConfig | None, arguments: list[str]) -> tuple[dict[str, Suggest], list[str]]:
    """The config's params then the command line's overrides: sweeps as suggestions, the rest as every
    trial's fixed overrides; the last of a key wins, as the command line wins over params in Hydra."""
    typed = [*(f"{k}={v}" for k, v in (params or {}).items()), *arguments]
    space: dict[str, Suggest] = {}
    fixed: dict[str, str] = {}
    for override in OverridesParser.create().parse_overrides(typed):
        key = override.get_key_element()
        space.pop(key, None)
        fixed.pop(key, None)
        if override.is_sweep_override():
            space[key] = suggestion(override)
        else:
            fixed[key] = override.input_line
    return space, list(fixed.values())


def open_storage(storage: str | None, heartbeat_interval: int, grace_period: int | None) -> Any:
    """None (in memory), a database URL (with a heartbeat), or a journal file on a shared folder."""
    if storage is None:
        return None
    if "://" in storage:
        import sqlalchemy.exc

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)  # the heartbeat's, since Optuna 2.9
            for attempt in range(3):  # workers started together on a new database all create its tables: one wins
                try:
                    return optuna.storages.RDBStorage(
                        storage, heartbeat_interval=heartbeat_interval, grace_period=grace_period
                    )
                except sqlalchemy.exc.IntegrityError:
                    if attempt == 2:
                        raise
    Path(storage).parent.mkdir(parents=True, exist_ok=True)
    return optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(storage))


def open_study(settings: dict[str, Any]) -> optuna.Study:
    """The study this worker shares (or creates); a storage that cannot be opened ends in one line."""
    storage = settings["storage"]
    try:
        study = optuna.create_study(
            storage=open_storage(storage, settings["heartbeat_interval"], settings["grace_period"]),
            study_name=settings["study_name"],
            sampler=settings["sampler"],
            pruner=settings["pruner"] or optuna.pruners.NopPruner(),
            direction=settings["direction"],
            load_if_exists=True,
        )
    except Exception as err:  # SQLAlchemy's, the driver's or the file system's, each its own kind
        reason = " ".join(str(err).split())[:300]
        print(f"error: hydra.sweeper.storage={storage} cannot be opened: {reason}", file=sys.stderr)
        sys.exit(2)
    if storage is not None:  # else every worker's seeded sampler would draw the same points
        study.sampler.reseed_rng()
    return study


def search(config: DictConfig, launcher: Any, settings: dict[str, Any], arguments: list[str]) -> None:
    """Trials until the study has n_trials, then the best so far in <sweep dir>/optimization_results.yaml."""
    n_trials = int(settings["n_trials"])
    space, fixed = search_space(settings.get("params"), arguments)
    study = open_study(settings)
    log.info(f"study {study.study_name} in {settings['storage'] or 'memory'}: {n_trials} trials in all")

    def objective(trial: optuna.Trial) -> float:
        if trial.number >= n_trials:  # another worker took the last trial as this one asked: not run
            trial.set_user_attr("not_run", f"the study had its n_trials={n_trials}")
            study.stop()
            return math.nan
        overrides = [*(f"{key}={draw(trial)}" for key, draw in space.items()), *fixed]
        RUNNING.trial, RUNNING.pruned_at = trial, None
        try:
            (job,) = launcher.launch([overrides], initial_job_idx=trial.number)
        finally:
            RUNNING.trial = None
        trial.set_user_attr("run_dir", job.hydra_cfg.hydra.runtime.output_dir)
        if job.return_value is None:  # the job recorded and printed why (src/sweeps/job.py)
            return math.nan  # Optuna's FAIL
        if RUNNING.pruned_at is not None:
            run_dir = Path(job.hydra_cfg.hydra.runtime.output_dir)
            write_record(run_dir, {**(read_result(run_dir) or {}), "status": "pruned", "pruned_at": RUNNING.pruned_at})
            raise optuna.TrialPruned(f"pruned at step {RUNNING.pruned_at}")
        return float(job.return_value)

    if len(study.get_trials(deepcopy=False)) < n_trials:
        limit = optuna.study.MaxTrialsCallback(n_trials, states=None)  # every state: running ones too
        study.optimize(objective, callbacks=[limit])
    else:
        log.info(f"study {study.study_name} already has {n_trials} trials: nothing to run")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)  # experimental since Optuna 2.9
        optuna.storages.fail_stale_trials(study)  # a dead worker's trial past its grace period, as optimize does
    best = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    if best:  # none when every trial failed: the sweep's summary then says so in one line
        results = {"name": "optuna", "best_params": study.best_trial.params, "best_value": study.best_value}
        OmegaConf.save(OmegaConf.create(results), Path(config.hydra.sweep.dir) / "optimization_results.yaml")
        log.info(
            f"the study's best of {len(study.trials)} trials so far: {study.best_value:.4f}, {study.best_trial.params}"
        )
