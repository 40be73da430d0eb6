"""How a run ends: its result.json, the best loss, the sample and the explorer page; or, when it is
stopped, one line saying what is kept and the command that resumes it (never a traceback)."""

from __future__ import annotations

import errno
import logging
import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from src.data.ngram import MAX_LADDER_CHARACTERS, Ladder, cached_ladder, place
from src.data.tokenizer import printable
from src.model.language_model import count_parameters
from src.run import preflight, record
from src.run.cli import fail
from src.training import exit_status
from src.training.bands import ReferenceBand
from src.training.callbacks import (
    CheckpointWriteError,
    GracefulInterrupt,
    Throughput,
    TrainingInterrupted,
    too_large,
    what_is_kept,
)
from src.training.flops import parameter_counts, training_flops_per_token
from src.training.heads import TrackHeads
from src.training.tensorboard import TensorBoard, watch_command

if TYPE_CHECKING:
    from src.training.checkpoint import Trained
log = logging.getLogger(__name__)


def run_name_and_keys() -> tuple[str, list[str]]:
    """(the run's name, the keys that set it apart): a sweep job's swept ones; a single run's "", those typed."""
    if not record.in_multirun():
        return "", record.varied_keys()
    from src.run.points import run_name, swept_keys

    return run_name(), record.varied_keys(swept_keys(HydraConfig.get()))


def in_memory_best(trainer: Any, lit: Any) -> Trained | None:
    """The model in memory, when best.ckpt was written at the step training ended on (sparing its read)."""
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


def text_ladder(plan: preflight.Plan, trainer: Any) -> Ladder | None:
    """The n-gram ladder of the run's text (src/data/ngram.py), cached beside its tokens; None for a text
    too long to count in memory."""
    datamodule = trainer.datamodule
    train, val = datamodule.splits["train"], datamodule.scored("val")
    if len(train) + len(val) > MAX_LADDER_CHARACTERS:
        return None
    return cached_ladder(plan.corpus.directory, train, val, plan.tokenizer.vocab_size)


def write_result(
    cfg: DictConfig, trainer: Any, lit: Any, started: float, ladder: Ladder | None = None, status: str | None = None
) -> None:
    """result.json (rank 0): what a sweep's summary reads, and what tells a rerun whether the run is done
    (status "interrupted": not yet, last.ckpt goes on)."""
    if not trainer.is_global_zero:
        return
    best = validated_loss(lit)
    speed = next((c.overall for c in trainer.callbacks if isinstance(c, Throughput)), None)
    tracker = next((c for c in trainer.callbacks if isinstance(c, TrackHeads)), None)
    heads = tracker.summary() if tracker is not None else None
    ended = status is None  # a stopped run records where it stands at once, without the ablation's passes
    ablation = tracker.ablate_each_head(lit.model) if heads is not None and ended else None
    T = lit.model.context_window
    per_token = training_flops_per_token(lit.model, T)
    tokens = trainer.global_step * cfg.data.batch_size * T * trainer.accumulate_grad_batches * trainer.world_size
    band = next((c.summary() for c in trainer.callbacks if isinstance(c, ReferenceBand)), None)
    ngram = None
    if ladder is not None:
        ngram = {**ladder.to_dict(), "placed": place(best, ladder) if best is not None else None}
    record.write_result(
        cfg.paths.output_dir,
        {
            "run_name": run_name_and_keys()[0],
            "status": status or ("ok" if best is not None else "not validated"),
            "best_val_loss": best,
            "best_val_bpc": best / math.log(2) if best is not None else None,
            "parameters": count_parameters(lit.model),
            "parameter_counts": parameter_counts(lit.model),  # all, non_embedding, transformer (training/flops.py)
            "flops_per_token": per_token,
            "tokens": tokens,  # trained, over all ranks
            "flops": per_token * tokens,  # the training compute C = 6N D + 12 L d T D
            "val_curve": [[step, loss] for step, loss in lit.val_curve],  # src.compare's compute multiplier
            "tokens_per_sec": speed,
            "steps": trainer.global_step,
            "wall_seconds": time.time() - started,
            "best_checkpoint": best_checkpoint(trainer),
            "heads": heads,  # the last validation's head scores (src/training/heads.py), or None
            "ablation": ablation,  # the val loss rise without each head at the end (src/model/ablation.py), or None
            "band": band,  # each validation against the reference band of its config (src/training/bands.py)
            "ngram": ngram,  # the text's n-gram ladder (src/data/ngram.py) and the best val loss on it
        },
    )


def report(cfg: DictConfig, plan: preflight.Plan, trainer: Any, lit: Any, started: float) -> float:
    """result.json, the best val loss, a sample from the best checkpoint, the explorer page."""
    best, best_path = lit.best_val_loss, best_checkpoint(trainer)
    if not trainer.is_global_zero:
        return best
    validated = validated_loss(lit) is not None
    ladder = text_ladder(plan, trainer) if validated and not trainer.fast_dev_run else None
    write_result(cfg, trainer, lit, started, ladder)
    if validated and trainer.fast_dev_run:
        log.info(f"fast_dev_run: val loss {best:.4f} over one batch; no checkpoint is written in this mode")
    elif validated:
        log.info(f"best val loss {best:.4f} -> {best_path}")
        if ladder is not None:
            log.info(place(best, ladder))
    tracker = next((c for c in trainer.callbacks if isinstance(c, TrackHeads)), None)
    for line in (tracker.became_line(), tracker.ablation_line()) if tracker is not None else ():
        if line:
            log.info(line)
    # What follows runs once, after training: its modules are imported here, not while the run starts.
    from src.model.generation import sample_text
    from src.training.checkpoint import load_trained

    s = cfg.sample
    trained = None  # best.ckpt, for the sample and the explorer page
    if best_path and (s.max_new_tokens > 0 or cfg.explorer):
        trained = in_memory_best(trainer, lit) or load_trained(best_path)
    prompt = plan.prompts["sample"]
    if s.max_new_tokens > 0:
        model = trained.model if trained else lit.model.eval()
        text = sample_text(
            model, plan.tokenizer, prompt, s.max_new_tokens, s.temperature, s.top_k, s.top_p, seed=cfg.seed
        )
        log.info("sample:\n" + printable(text))  # the text's control characters escaped, not sent to the terminal
    if cfg.explorer and best_path:  # the explorer wing: the model running in a web page
        from src.explorer.page import write_explorer
        from src.explorer.payload import split_excerpt

        val = trainer.datamodule.splits["val"]  # the split this run validated on, as text for the page
        excerpt = split_excerpt(val, plan.tokenizer.vocab, plan.corpus.source, 2000)
        out = Path(cfg.paths.output_dir) / "explore.html"
        page = write_explorer(Path(best_path), out, cfg.paths.data_dir, prompt, trained=trained, excerpt=excerpt)
        log.info(f"see inside it: open {page.resolve().as_uri()}")
    # Where the other loggers' metrics went (src/trackers.py), before TensorBoard's line, which stays last.
    if not record.in_multirun():
        for logger in trainer.loggers:
            if hasattr(logger, "metrics_line"):
                log.info(logger.metrics_line())
    # A sweep says it once, for all its jobs (SweepSummary); fast_dev_run and logger=null write no events.
    if not record.in_multirun() and any(isinstance(logger, TensorBoard) for logger in trainer.loggers):
        log.info(f"watch it: {watch_command(cfg.paths.log_dir, cfg.paths.output_dir)}")
    return best


def raise_if_interrupted(cfg: DictConfig, trainer: Any, lit: Any, started: float) -> None:
    """A stop signal during or after the last step: last.ckpt holds it, and the run is done."""
    interrupt = next(c for c in trainer.callbacks if isinstance(c, GracefulInterrupt))
    if interrupt.received:
        write_result(cfg, trainer, lit, started)  # nothing left to resume
        last = Path(cfg.paths.output_dir) / "checkpoints" / "last.ckpt"
        raise TrainingInterrupted(interrupt.received, trainer.global_step, last)


@contextmanager
def stops_in_one_line(cfg: DictConfig, plan: preflight.Plan, trainer: Any, started: float) -> Iterator[None]:
    """A run stopped by a signal, a lost DDP rank or a full disk ends in one line naming what is kept."""
    run_dir = Path(cfg.paths.output_dir)
    try:
        yield
    except TrainingInterrupted as stop:
        if record.in_multirun():
            raise  # the sweep stops, and says so once (sweeps.job.run_job)
        status = exit_status(stop.signal_name)
        if stop.step >= trainer.max_steps:
            result = run_dir / "result.json"
            fail(f"{stop}; training had ended, its result is in {result}; the sample after it was skipped", status)
        if not (run_dir / "checkpoints" / "last.ckpt").is_file():
            fail(f"{stop}: run the command again to start over", status=status)
        write_result(cfg, trainer, trainer.lightning_module, started, status="interrupted")  # where it stands
        resume = f"python -m src.train ckpt_path={run_dir}"
        if stop.signal_name == "SIGUSR1":  # SLURM's pre-emption notice (the cluster wing)
            from src.cluster.slurm import requeue_preempted, slurm_job

            if slurm_job() is not None:
                requeued = requeue_preempted(cfg.paths.log_dir, run_dir, resume, trainer.is_global_zero)
                fail(f"{stop}; {requeued}", status)
        fail(f"{stop}; resume with: {resume}; see inside it now: python -m src.explore ckpt_path={run_dir}", status)
    except RuntimeError as err:
        if trainer.world_size == 1:
            raise
        from src.cluster.ranks import lost_rank, peer_lost

        if not peer_lost(err):
            raise
        fail(lost_rank(trainer, run_dir, err), status=1)
    except OSError as err:  # a checkpoint's own message already says what it needed and what is kept
        if isinstance(err, CheckpointWriteError):
            raise
        if err.errno == errno.EFBIG:  # TensorBoard's events, the log: past `ulimit -f`
            fail(f"{too_large()}; {what_is_kept(run_dir / 'checkpoints')}")
        if err.errno not in preflight.DISK_FULL:
            raise
        fail(preflight.disk_full(cfg, plan.tokenizer.vocab_size, run_dir, err))
