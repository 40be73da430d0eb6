"""`python -m src.train [overrides]`: train, validate, checkpoint, log to TensorBoard, print a sample.

The recipe reads as lightning-hydra-template's: plan, build (data, model, callbacks, logger,
trainer), fit, report. On the command line, `check_before_hydra` does the first two once, for the
run's real directory, before Hydra creates it (`preflight.plan` checks values, text, checkpoint
and prompts; each part refuses its own keys as it is built), and hands the built run to train();
train() plans and builds itself only a config the command line did not (a sweep job's, or one
composed in Python).
"""

# ruff: noqa: E402  (the imports follow the signal handler, so that one covers them too)
from __future__ import annotations

import os
import signal
import sys

from src.training.signals import STOP_SIGNALS, exit_status, requeue, requeued_run_file, slurm_job, stop_outside_training

if __name__ == "__main__":  # a signal while the libraries load, or before and after training: one line
    from src.run.help import exit_on_help

    exit_on_help("train")  # --help answers before the libraries load
    for _signal in STOP_SIGNALS:
        signal.signal(_signal, stop_outside_training)

import logging
import math
import time
from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import src.training.lightning_import  # noqa: F401  (first: Lightning without scipy.signal)

# isort: split
import lightning as L
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from lightning.pytorch.utilities import rank_zero_only
from omegaconf import DictConfig, OmegaConf

from src.data.datamodule import TextDataModule
from src.data.tokenizer import printable
from src.model.language_model import count_parameters
from src.run import meeting, preflight, record, rundir
from src.run.cli import command, fail
from src.run.preflight import build_callbacks, build_logger
from src.run.rules import ConfigError
from src.training.callbacks import GracefulInterrupt, TokensPerSecond, TrainingInterrupted
from src.training.checkpoint_io import CheckpointWriteError
from src.training.gpt_module import GPTModule
from src.training.heads import TrackHeads
from src.training.tensorboard import LogHyperparams, TensorBoard, trial_name, watch_command

if TYPE_CHECKING:
    from src.training.checkpoint import Trained
log = logging.getLogger(__name__)


def parameter_count(n: int) -> str:
    """0.70M for the default model, 4,160 for a tiny one (not 0.00M)."""
    return f"{n / 1e6:.2f}M" if n >= 100_000 else f"{n:,}"


def show_progress_bar(setting: Any) -> bool:
    if str(setting).lower() == "auto":
        return sys.stderr.isatty() and not os.environ.get("CI")
    return str(setting).lower() == "true"


def tensorboard_hparams(cfg: DictConfig, num_parameters: int, varied: list[str]) -> dict[str, Any]:
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


class Run(NamedTuple):
    """What `python -m src.train` fits, each part built once from its config."""

    datamodule: TextDataModule
    module: GPTModule
    trainer: L.Trainer


class Ready(NamedTuple):
    """A run planned and built, not yet fitted: what the command line's checks hand train()."""

    plan: preflight.Plan
    run: Run


def build(cfg: DictConfig, plan: preflight.Plan, module_class: type[GPTModule] = GPTModule) -> Run:
    """The run's objects from a config and its plan: seed, data, model, callbacks, logger, trainer.

    As lightning-hydra-template's train() builds its object dict; the benchmarks build here too
    (module_class: their GPTModule variants), so that they measure what a run runs. Constructors
    only: nothing is trained or written, so the command line builds before anything is written.
    """
    L.seed_everything(cfg.seed, workers=True, verbose=False)
    datamodule = preflight.build_datamodule(cfg, plan.tokenizer, plan.corpus)
    datamodule.setup("fit")  # splits the text the plan mapped (Lightning's own call is then free)
    lit = module_class(
        model=OmegaConf.to_container(cfg.model, resolve=True),
        tokenizer=plan.tokenizer.to_dict(),
        optimizer=OmegaConf.to_container(cfg.optimizer, resolve=True),
        data={**{k: cfg.data[k] for k in ("path", "val_fraction", "test_fraction")}, "sha256": plan.corpus.sha256},
    )
    varied = record.varied_keys()
    trial = trial_name(cfg.paths.output_dir, record.in_multirun())
    hparams = LogHyperparams(tensorboard_hparams(cfg, count_parameters(lit.model), varied), varied, trial)
    shown = show_progress_bar(cfg.progress_bar)
    callbacks = [*build_callbacks(cfg, plan.prompts, shown), GracefulInterrupt(), hparams]
    logger = build_logger(cfg, version=record.run_name())  # a sweep job is named by its overrides
    trainer = preflight.build_trainer(cfg, callbacks, logger, shown)
    if cfg.compile:
        lit.model.compile()  # in place: checkpoints keep the plain parameter names
    return Run(datamodule, lit, trainer)


def plan_and_build(cfg: DictConfig) -> Ready:
    """A sweep job's run (the command line checked only its point), or one started from Python."""
    plan = preflight.plan(cfg)
    run = build(cfg, plan)
    where = "hydra.sweep.dir" if record.in_multirun() else "hydra.run.dir"
    preflight.check_free_space(cfg, plan.tokenizer.vocab_size, cfg.paths.output_dir, where)
    return Ready(plan, run)


def train(cfg: DictConfig, ready: Ready | None = None) -> float:
    """Train as configured; return the best validation loss (what sweepers minimise).

    ready: the run as the command line planned and built it (check_before_hydra), else built here."""
    started = time.time()
    plan, (datamodule, lit, trainer) = ready if ready is not None else plan_and_build(cfg)
    if not record.in_multirun():
        meeting.meet(cfg)  # torchrun's ranks: started alike? (before Lightning forms the process group)
    interrupt = next(c for c in trainer.callbacks if isinstance(c, GracefulInterrupt))
    num_parameters = count_parameters(lit.model)
    run_dir = Path(cfg.paths.output_dir)
    if trainer.is_global_zero:
        log.info(
            f"{cfg.model.kind}: {parameter_count(num_parameters)} parameters | vocab {plan.tokenizer.vocab_size} "
            f"| {plan.corpus.source.name}: {datamodule.describe()} | {trainer.max_steps} steps of "
            f"{cfg.data.batch_size}x{cfg.model.context_window} tokens | run dir {run_dir}"
        )
        if plan.resume is not None:
            log.info(f"resuming from {plan.resume}")

    with rundir.hold_run_dir(run_dir) if trainer.is_global_zero else nullcontext():
        try:
            trainer.fit(lit, datamodule=datamodule, ckpt_path=str(plan.resume) if plan.resume else None)
            if interrupt.received:  # during or after the last step: last.ckpt holds it, the run is done
                write_result(cfg, trainer, lit, num_parameters, time.time() - started)  # nothing left to resume
                raise TrainingInterrupted(
                    interrupt.received, trainer.global_step, run_dir / "checkpoints" / "last.ckpt"
                )
            return report(cfg, plan, trainer, lit, num_parameters, time.time() - started)
        except TrainingInterrupted as stop:
            if record.in_multirun():
                raise  # the sweep stops, and says so once (sweeps.job.run_job)
            status = exit_status(stop.signal_name)
            if stop.step >= trainer.max_steps:
                result = run_dir / "result.json"
                fail(f"{stop}; training had ended, its result is in {result}; the sample after it was skipped", status)
            if (run_dir / "checkpoints" / "last.ckpt").is_file():
                resume = f"python -m src.train ckpt_path={run_dir}"
                if stop.signal_name == "SIGUSR1" and slurm_job() is not None:  # SLURM's pre-emption notice
                    fail(f"{stop}; {requeue_preempted(cfg, run_dir, resume, trainer.is_global_zero)}", status)
                fail(f"{stop}; resume with: {resume}", status=status)
            fail(f"{stop}: run the command again to start over", status=status)
        except RuntimeError as err:
            if trainer.world_size == 1 or not peer_lost(err):
                raise
            fail(lost_rank(trainer, run_dir, err), status=1)
        except OSError as err:  # a checkpoint's own message already says what it needed and what is kept
            if err.errno not in preflight.DISK_FULL or isinstance(err, CheckpointWriteError):
                raise
            fail(preflight.disk_full(cfg, plan.tokenizer.vocab_size, run_dir, err))


# What gloo and NCCL say when the process of another rank is gone (killed, crashed, its machine down).
PEER_LOST = (
    "Connection closed by peer",
    "Connection reset by peer",
    "Broken pipe",
    "Socket Timeout",
    "communicator was aborted",
)


def peer_lost(err: RuntimeError) -> bool:
    return any(words in str(err) for words in PEER_LOST)


def lost_rank(trainer: Any, run_dir: Path, err: RuntimeError) -> str:
    """One line for a rank whose peer died under DDP: which rank was lost, at which step, what is kept."""
    world, me = trainer.world_size, trainer.global_rank
    who = f"rank {1 - me} of 2" if world == 2 else f"another of the {world} ranks (this is rank {me})"
    cause = next(words for words in PEER_LOST if words in str(err))
    last = run_dir / "checkpoints" / "last.ckpt"
    kept = (
        f"the newest checkpoint, {last}, is intact; resume with: python -m src.train ckpt_path={run_dir}"
        if last.is_file()
        else "no checkpoint was written yet: run the command again to start over"
    )
    return f"{who} ended at step {trainer.global_step} (its process is gone: {cause}): {kept}"


def requeue_preempted(cfg: DictConfig, run_dir: Path, resume: str, rank_zero: bool) -> str:
    """A SLURM job pre-empted (SIGUSR1, last.ckpt saved): requeue it (rank 0), noting its run directory,
    where the job SLURM starts again resumes through continue_run and the resume checks. What was done."""
    job = slurm_job()
    assert job is not None
    if not rank_zero:
        return f"rank 0 requeues SLURM job {job}"
    note = requeued_run_file(cfg.paths.log_dir, job)
    note.parent.mkdir(parents=True, exist_ok=True)
    note.write_text(str(run_dir.absolute()))
    failed = requeue(job)
    if failed is not None:
        return f"requeuing SLURM job {job} failed ({failed}): resume with: {resume}"
    return f"requeued SLURM job {job}: it resumes from there when it starts again (as {resume})"


def in_memory_best(trainer: Any, lit: GPTModule) -> Trained | None:
    """The model in memory as best.ckpt holds it, when best.ckpt was written at the step training
    ended on (the usual case: the final validation was the best), sparing a read of the file."""
    from src.training.checkpoint import Trained

    best_score = getattr(trainer.checkpoint_callback, "best_model_score", None)
    if lit.best_val_step != trainer.global_step or best_score is None or float(best_score) != lit.best_val_loss:
        return None
    return Trained(lit.model.eval(), lit.tokenizer, dict(lit.hparams), trainer.global_step, lit.best_val_loss)


def best_checkpoint(trainer: Any) -> str:
    return getattr(trainer.checkpoint_callback, "best_model_path", "") if trainer.checkpoint_callback else ""


def validated_loss(lit: Any) -> float | None:
    """The best val loss, or None when the run never validated (its best is still infinite)."""
    return lit.best_val_loss if math.isfinite(lit.best_val_loss) else None


def write_result(cfg: DictConfig, trainer: Any, lit: Any, num_parameters: int, wall: float) -> None:
    """result.json (rank 0): what a sweep's summary reads, and what tells a rerun that the run is done."""
    if not trainer.is_global_zero:
        return
    best = validated_loss(lit)
    speed = next((c.overall for c in trainer.callbacks if isinstance(c, TokensPerSecond)), None)
    heads = next((c.summary() for c in trainer.callbacks if isinstance(c, TrackHeads)), None)
    record.write_result(
        cfg.paths.output_dir,
        {
            "status": "ok" if best is not None else "not validated",
            "best_val_loss": best,
            "best_val_bpc": best / math.log(2) if best is not None else None,
            "parameters": num_parameters,
            "tokens_per_sec": speed,
            "steps": trainer.global_step,
            "wall_seconds": wall,
            "best_checkpoint": best_checkpoint(trainer),
            "heads": heads,  # the last validation's head scores (src/training/heads.py), or None
        },
    )


def report(cfg: DictConfig, plan: preflight.Plan, trainer: Any, lit: Any, num_parameters: int, wall: float) -> float:
    """result.json for sweeps, the best val loss, and a sample from the best checkpoint."""
    best, best_path = lit.best_val_loss, best_checkpoint(trainer)
    if not trainer.is_global_zero:
        return best
    write_result(cfg, trainer, lit, num_parameters, wall)
    validated = validated_loss(lit) is not None
    if validated and trainer.fast_dev_run:
        log.info(f"fast_dev_run: val loss {best:.4f} over one batch; no checkpoint is written in this mode")
    elif validated:
        log.info(f"best val loss {best:.4f} -> {best_path}")
    # What follows runs once, after training: its modules (the sampler, the checkpoint reader, the
    # explorer page) are imported here, not while the run starts.
    from src.model.generation import sample_text
    from src.training.checkpoint import load_trained

    s = cfg.sample
    trained = None  # best.ckpt, for the sample and the explorer page
    if best_path and (s.max_new_tokens > 0 or cfg.explorer):
        trained = in_memory_best(trainer, lit) or load_trained(best_path)
    if s.max_new_tokens > 0:
        model = trained.model if trained else lit.model.eval()
        text = sample_text(
            model,
            plan.tokenizer,
            plan.prompts["sample"],
            s.max_new_tokens,
            s.temperature,
            s.top_k,
            s.top_p,
            seed=cfg.seed,
        )
        log.info("sample:\n" + printable(text))  # the text's control characters escaped, not sent to the terminal
    if cfg.explorer and best_path:
        from src.explorer.page import write_explorer
        from src.explorer.payload import split_excerpt

        out = Path(cfg.paths.output_dir) / "explore.html"
        val = trainer.datamodule.splits["val"]  # the split this run validated on, as text for the page
        excerpt = split_excerpt(val, plan.tokenizer.vocab, plan.corpus.source, 2000)
        page = write_explorer(
            Path(best_path), out, cfg.paths.data_dir, plan.prompts["sample"], trained=trained, excerpt=excerpt
        )
        log.info(f"see inside it: open {page.resolve().as_uri()}")
    # A sweep says it once, for all its jobs (SweepSummary); fast_dev_run and logger=null write no events.
    if not record.in_multirun() and any(isinstance(logger, TensorBoard) for logger in trainer.loggers):
        log.info(f"watch it: {watch_command(cfg.paths.log_dir, cfg.paths.output_dir)}")
    return best


def continue_run(argv: list[str]) -> list[str]:
    """`ckpt_path=<run dir, its checkpoint, or last>` continues that run where it was saved.

    The run's own overrides (its .hydra/overrides.yaml) come first, so the same model and settings
    are rebuilt; overrides typed now follow and win, as the later of two overrides does in Hydra
    (e.g. a larger trainer.max_steps). Output goes to the same run directory: one curve.
    """
    log_dirs = [a.split("=", 1)[1] for a in argv if a.startswith("paths.log_dir=")]
    log_dir = log_dirs[-1] if log_dirs else Path(__file__).resolve().parent.parent / "outputs"
    given = [typed_value(a) for a in argv if a.startswith("ckpt_path=")]
    requeued = requeued_run(log_dir) if not given and "-m" not in argv and "--multirun" not in argv else None
    if requeued is not None:  # the same command, started again by SLURM after it pre-empted the job
        print(f"SLURM requeued job {slurm_job()}: resuming its run {requeued}", file=sys.stderr)
        argv = [*(a for a in argv if not a.startswith("hydra.run.dir=")), quoted("ckpt_path", requeued)]
        given = [requeued]
    rerun = rerun_to_resume(argv) if not given and requeued is None else None
    if rerun is not None:  # the same command again into a run directory that holds its interrupted run
        argv = [*(a for a in argv if not a.startswith("hydra.run.dir=")), quoted("ckpt_path", rerun)]
        given = [str(rerun)]
    if not given or given[-1] in ("null", "") or any(a in ("-m", "--multirun") or "hydra.run.dir=" in a for a in argv):
        return argv
    from src.training.checkpoint import CheckpointError, find_checkpoint  # a run from scratch reads none

    try:
        checkpoint = find_checkpoint(given[-1], log_dir, prefer="last")
    except CheckpointError:
        return argv  # the pre-check reports it
    run_dir = checkpoint.parent.parent
    saved = run_dir / ".hydra" / "overrides.yaml"
    if checkpoint.parent.name != "checkpoints" or not saved.is_file():
        return argv
    previous = [o for o in OmegaConf.load(saved) if not o.startswith(("ckpt_path=", "hydra."))]
    typed = [a for a in argv if not a.startswith("ckpt_path=")]
    return [*previous, *typed, quoted("ckpt_path", checkpoint), quoted("hydra.run.dir", run_dir)]


def typed_run_dir(argv: list[str]) -> Path | None:
    run_dirs = [typed_value(a) for a in argv if a.startswith("hydra.run.dir=")]
    return Path(run_dirs[-1]) if run_dirs else None


def overwrite_typed(argv: list[str]) -> bool:
    return any(typed_value(a).lower() == "true" for a in argv if a.lstrip("+").startswith("overwrite="))


def rerun_to_resume(argv: list[str]) -> Path | None:
    """The run directory to resume when a single run's command is typed again into the hydra.run.dir
    that holds its interrupted run (the same hyperparameters; overwrite=true starts over instead),
    else None: a rerun then continues where the run stopped, rather than overwriting its last.ckpt
    from step 0. Said on stderr. Any other run there is refused by check_before_hydra."""
    run_dir = typed_run_dir(argv)
    if run_dir is None or "-m" in argv or "--multirun" in argv or overwrite_typed(argv) or rundir.launched_rank() != 0:
        return None
    if record.run_state(run_dir) != "interrupted" or not record.same_job(record.saved_overrides(run_dir), argv):
        return None
    print(
        f"hydra.run.dir={run_dir} holds an interrupted run of this command: resuming it from its last.ckpt "
        f"(overwrite=true starts over)",
        file=sys.stderr,
    )
    return run_dir


def check_rerun(run_dir: Path, cfg: DictConfig) -> None:
    """A new run into a run directory that holds a finished run, or an interrupted run of other
    hyperparameters, is refused (nothing is written); overwrite=true replaces it: its checkpoints,
    events and result are removed before the new run starts."""
    state = record.run_state(run_dir)
    if state is None or cfg.ckpt_path is not None:
        return
    if cfg.overwrite:
        import shutil

        for name in ("checkpoints", "tensorboard"):
            shutil.rmtree(run_dir / name, ignore_errors=True)
        for name in (record.RESULT, "explore.html"):
            (run_dir / name).unlink(missing_ok=True)
        return
    done = record.read_result(run_dir) or {}
    if state == "finished":
        loss = done.get("best_val_loss")
        what = f"a finished run ({done.get('steps')} steps" + (f", best val loss {loss:.4f})" if loss else ")")
        more = f"python -m src.train ckpt_path={run_dir} trainer.max_steps=<more>"
    else:
        theirs = " ".join(o for o in record.saved_overrides(run_dir) or [] if not o.startswith("hydra."))
        what = f"an interrupted run of other settings ({theirs or 'the defaults'})"
        more = f"python -m src.train ckpt_path={run_dir} (settings typed after it win)"
    raise ConfigError(
        f"hydra.run.dir={run_dir} holds {what}: kept; continue it with {more}, choose another "
        f"hydra.run.dir, or add overwrite=true to replace it"
    )


def requeued_run(log_dir: str | Path) -> str | None:
    """The run directory a pre-empted attempt of this SLURM job noted (requeue_preempted), when SLURM
    started the job again (SLURM_RESTART_COUNT > 0), else None."""
    job, restarts = slurm_job(), os.environ.get("SLURM_RESTART_COUNT", "0")
    if job is None or not restarts.isdigit() or int(restarts) == 0:
        return None
    note = requeued_run_file(log_dir, job)
    return note.read_text().strip() if note.is_file() else None


def typed_value(override: str) -> str:
    """The value of `key=value` as Hydra reads it (quotes removed), or as typed if Hydra cannot."""
    try:
        return str(OverridesParser.create().parse_overrides([override])[0].value())
    except HydraException:
        return override.split("=", 1)[1]  # unquoted spaces: the path as the user typed it


def quoted(key: str, value: str | Path) -> str:
    """`key='value'` in Hydra's syntax, so a path with spaces or other characters stays one value."""
    text = str(value).replace("'", "\\'")
    return f"{key}='{text}'"


def check_before_hydra(cfg: DictConfig, argv: list[str]) -> Ready:
    """Plan and build a single run before Hydra creates its directory, refusing bad input with nothing
    written; cfg's paths.output_dir is the run's real directory (src/run/cli.py's job_config)."""
    if any(a.startswith("hydra.job.chdir=") and a.split("=", 1)[1].lower() == "true" for a in argv):
        raise ConfigError(
            "hydra.job.chdir=true would run the training inside its run directory, where relative paths "
            "(data.path, ckpt_path) no longer point where you typed them: leave it false"
        )
    run_dirs = [typed_value(a) for a in argv if a.startswith("hydra.run.dir=")]
    rundir.check_launched_run(bool(run_dirs))
    preflight.check_writable(run_dirs[-1] if run_dirs else cfg.paths.log_dir)
    if run_dirs and rank_zero_only.rank == 0:  # DDP's other ranks join the run that rank 0 holds
        rundir.check_not_in_use(run_dirs[-1])
        if not cfg.overwrite:
            check_rerun(Path(run_dirs[-1]), cfg)
    plan = preflight.plan(cfg)
    run = build(cfg, plan)
    if run_dirs:
        preflight.check_free_space(cfg, plan.tokenizer.vocab_size, run_dirs[-1], "hydra.run.dir")
    else:  # Hydra names the run's folder under paths.log_dir when it starts
        preflight.check_free_space(cfg, plan.tokenizer.vocab_size, cfg.paths.log_dir, "paths.log_dir")
    if run_dirs and rank_zero_only.rank == 0:
        rundir.take_run_dir(run_dirs[-1])
        if cfg.overwrite:  # the old run's files go, now that the directory is held
            check_rerun(Path(run_dirs[-1]), cfg)
    return Ready(plan, run)


def task(cfg: DictConfig, ready: Ready | None = None) -> float | None:
    if record.in_multirun():
        from src.sweeps.job import run_job  # a sweep's job: skipped, resumed or contained as a sweep needs

        return run_job(cfg, train)
    return train(cfg, ready)


def check_sweep_job(cfg: DictConfig, point: list[str]) -> None:
    """One point of a multirun, checked before the sweep starts (src/sweeps/checks.py, loaded only then)."""
    from src.sweeps.checks import check_sweep_job

    check_sweep_job(cfg, point)


def main() -> Any:
    sys.argv[1:] = continue_run(sys.argv[1:])  # Hydra reads the command line from sys.argv
    return command("train", task, check=check_before_hydra, check_sweep=check_sweep_job)


def exit_without_teardown() -> None:
    """End a finished single run at once: the exit handlers run (log files flushed and closed,
    temporary files removed), the interpreter's teardown of ~3,000 modules and ~400,000 objects
    does not (its time: BENCHMARKS.md, "Whole run, process start to exit"; nothing is written in it). Everything the run
    writes is closed by then: checkpoints, TensorBoard (at the end of fit), result.json, the page."""
    import atexit

    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
    if not any(a in ("-m", "--multirun") for a in sys.argv[1:]):  # a sweep's launcher shuts down its workers
        exit_without_teardown()
