"""What a resumed run checks (ckpt_path set): the checkpoint continues only as the model, optimizer
and text it saved, and only if it has steps left to train. Loaded by preflight.plan only on a resume.
"""

from __future__ import annotations

from dataclasses import MISSING, fields
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from src.data.token_cache import EncodedCorpus
from src.data.tokenizer import CharTokenizer, show_characters
from src.model import MODELS
from src.rules import ConfigError
from src.run.record import read_result, resumable


def check_resume(checkpoint: dict[str, Any], path: Path, cfg: DictConfig, corpus: EncodedCorpus) -> CharTokenizer:
    """A checkpoint can continue only as the model and optimizer it saved; returns its tokenizer."""
    saved = checkpoint["hyper_parameters"]
    requested = OmegaConf.to_container(cfg.model, resolve=True)
    # A checkpoint from before an option existed was trained as that option's default.
    config_class = MODELS[saved["model"].get("kind", "gpt")][1]
    defaults = {f.name: f.default for f in fields(config_class) if f.default is not MISSING}
    trained = {**defaults, **saved["model"]}
    for key in sorted(set(trained) | set(requested)):
        if key not in ("fused", "vocab_size") and trained.get(key) != requested.get(key):
            raise ConfigError(
                f"{path} was trained with model.{key}={trained.get(key)}, but the config says "
                f"{requested.get(key)}: resume with the run's own model options, or start a new run without ckpt_path"
            )
    name = saved.get("optimizer", {}).get("name")
    if name != cfg.optimizer.name:
        raise ConfigError(
            f"{path} was trained with optimizer={name}, whose state it holds, but the config says "
            f"optimizer={cfg.optimizer.name}: resume with optimizer={name}, or start a new run without ckpt_path"
        )
    check_same_text(saved.get("data") or {}, path, cfg, corpus)
    tokenizer = CharTokenizer.from_dict(saved["tokenizer"])
    unknown = sorted(set(corpus.vocab) - set(tokenizer.vocab))
    if unknown:
        raise ConfigError(
            f"data.path={corpus.source} has {len(unknown)} character(s) that {path} never saw "
            f"({show_characters(unknown)}): resume on the text the run was trained on, "
            f"or start a new run without ckpt_path"
        )
    step = checkpoint.get("global_step", 0)
    if step >= cfg.trainer.max_steps and not unrecorded_end(path):
        raise ConfigError(
            f"{path} has already trained {step} steps and trainer.max_steps={cfg.trainer.max_steps}: "
            f"there is nothing left to train; set trainer.max_steps above {step} to continue"
        )
    return tokenizer


def unrecorded_end(path: Path) -> bool:
    """Whether `path` is the last.ckpt of a run killed after its last step, before its result.json:
    resuming it trains nothing, and records the run's end."""
    run_dir = path.parent.parent
    record = read_result(run_dir)
    return path.name == "last.ckpt" and path.parent.name == "checkpoints" and (record is None or resumable(record))


def check_same_text(saved: dict[str, Any], path: Path, cfg: DictConfig, corpus: EncodedCorpus) -> None:
    """A resume continues on the run's own text (its sha256; older checkpoints: its path); another
    text, fine-tuning, must be asked for with finetune=true."""
    if cfg.finetune:
        return
    was_sha, was_path = saved.get("sha256"), saved.get("path")
    if was_sha is not None:
        same = was_sha == corpus.sha256
    else:
        same = was_path is None or Path(was_path).expanduser().resolve() == Path(corpus.source).resolve()
    if not same:
        trained_on = f"{was_path or 'Tiny Shakespeare'}" + (f", sha256 {was_sha[:12]}..." if was_sha else "")
        raise ConfigError(
            f"{path} was trained on another text ({trained_on}) than data.path={corpus.source} "
            f"({corpus.num_tokens:,} characters, sha256 {corpus.sha256[:12]}...): resume on the run's own text, "
            f"or add finetune=true to continue training on this one"
        )
