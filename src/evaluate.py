"""`python -m src.evaluate ckpt_path=...`: exact loss, bpc, perplexity and accuracy of a checkpoint.

By default it scores the whole val (and test) split, however long; `val_tokens=N` scores the
first N characters of each, as training's data.val_tokens does. `ablate=L0H2` (or a list,
`ablate=[L0H2,L1H0]`) scores them again without those heads (src/model/ablation.py) and prints the
loss with and without.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import src.training.lightning_import  # noqa: F401  (first: Lightning without scipy.signal)

# isort: split
import lightning as L
import torch
from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, ListConfig

from src import rules
from src.data.corpus import recorded_text
from src.data.datamodule import TextDataModule
from src.model.ablation import MODES, ablate, parse_heads
from src.model.checks import setting
from src.run.cli import command
from src.run.config import CHECKPOINT, PATHS
from src.training.checkpoint import Trained, describe, find_checkpoint, pick_device
from src.training.gpt_module import GPTModule


@dataclass
class EvaluateSchema:
    ckpt_path: str | None = setting(None, CHECKPOINT)
    data_path: str | None = setting(None, "null = the text the checkpoint was trained on")
    batch_size: int | None = setting(None, "windows per batch; null: sized by tokens for the device")
    val_tokens: int | None = setting(
        None, "null = score the whole val (and test) split; N = only its first N characters"
    )
    device: str = setting("auto", "auto = a GPU when there is one, else cpu")
    ablate: Any = setting(None, "heads to take out, L<layer>H<head> or a list [L0H2,L1H0]: loss with and without")
    ablate_mode: str = setting("zero", "zero, or mean: each head's output its mean over the first val windows")
    paths: Any = setting(None, PATHS)


MEAN_WINDOWS = 16  # ablate_mode=mean: the val windows each head's output is averaged over, as the head scores'
ConfigStore.instance().store(name="evaluate_schema", node=EvaluateSchema)  # conf/evaluate.yaml names it


def trainer_devices(device: torch.device) -> dict[str, Any]:
    """Lightning's accelerator and devices for one torch device: cuda:1 is GPU 1, not the first GPU."""
    if device.type == "cuda":
        return {"accelerator": "gpu", "devices": [device.index or 0]}
    return {"accelerator": device.type, "devices": 1}  # mps or cpu


def run(cfg: DictConfig) -> dict[str, float]:
    if cfg.batch_size is not None:
        rules.positive_int("batch_size", cfg.batch_size, "or null")
    if cfg.val_tokens is not None:
        rules.positive_int("val_tokens", cfg.val_tokens, "or null")
    rules.choice("ablate_mode", cfg.ablate_mode, MODES)
    path = find_checkpoint(cfg.ckpt_path, cfg.paths.log_dir)
    lit = GPTModule.from_checkpoint(path)
    heads = None
    if cfg.ablate is not None:
        listed = isinstance(cfg.ablate, ListConfig)  # ablate=[L0H2,L1H0]; anything else is one name
        names = [str(name) for name in cfg.ablate] if listed else str(cfg.ablate)
        heads = parse_heads(names, lit.model.num_layers, lit.model.cfg.num_heads)
    split = lit.hparams.get("data") or {}
    # This command's own keys, before the DataModule would name training's (data.val_tokens, data.path).
    rules.val_tokens(cfg.val_tokens, lit.model.context_window, key="val_tokens")
    if cfg.data_path is not None and not Path(cfg.data_path).expanduser().is_file():
        raise ValueError(
            f"data_path={cfg.data_path} does not exist or is not a file: point data_path at a UTF-8 text file, "
            f"or leave it null for the text the checkpoint was trained on"
        )
    # The text the user names, else the run's own if that file still is it (the checkpoint records its sha256).
    text = (
        Path(cfg.data_path).expanduser()
        if cfg.data_path is not None
        else recorded_text(split, cfg.paths.data_dir, "data_path")
    )
    trained = Trained(lit.model, lit.tokenizer, dict(lit.hparams), lit.trained_steps, lit.best_val_loss)
    print("\n".join([*describe(path, trained, chosen=cfg.ckpt_path is None), f"text: {text}"]), file=sys.stderr)
    datamodule = TextDataModule(
        context_window=lit.model.context_window,
        batch_size=1,  # no training here: only the evaluation batches below are drawn
        val_batch_size=cfg.batch_size,
        path=text,
        cache_dir=cfg.paths.data_dir,
        val_fraction=split.get("val_fraction", 0.1),
        test_fraction=split.get("test_fraction", 0.0),
        val_tokens=cfg.val_tokens,
        tokenizer=lit.tokenizer,
    )
    datamodule.prepare_data()
    datamodule.setup()
    device = pick_device(cfg.device)
    trainer = L.Trainer(
        **trainer_devices(device),
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        use_distributed_sampler=False,
    )
    results: dict[str, float] = {}
    stages = [trainer.validate] + ([trainer.test] if "test" in datamodule.splits else [])
    for stage in stages:
        stage(lit, datamodule=datamodule, verbose=False)
        results.update({k: float(v) for k, v in trainer.callback_metrics.items()})
    if heads is not None:
        T = lit.model.context_window
        windows = max(1, min(MEAN_WINDOWS, len(datamodule.splits["val"]) // T))
        mean_over = torch.as_tensor(datamodule.splits["val"][: windows * T].astype("int64")).view(windows, T)
        lit.eval()
        with ablate(lit.model, heads, cfg.ablate_mode, mean_over.to(lit.device)):
            for stage in stages:
                stage(lit, datamodule=datamodule, verbose=False)
                results.update({f"{k}_ablated": float(v) for k, v in trainer.callback_metrics.items()})
    print(f"{lit.hparams.model['kind']} after {lit.trained_steps} steps")
    for s in ("val", "test"):
        if s in datamodule.splits:
            span, whole = len(datamodule.scored(s)), len(datamodule.splits[s])
            print(f"{s}: {'all ' if span == whole else ''}{span:,} of {whole:,} characters scored")
    print(f"{'split':<6} {'loss':>8} {'bpc':>7} {'ppl':>7} {'acc':>7}")
    for s in ("val", "test"):
        if f"{s}/loss" in results:
            print(
                f"{s:<6} {results[f'{s}/loss']:>8.4f} {results[f'{s}/bpc']:>7.3f} "
                f"{results[f'{s}/ppl']:>7.2f} {results[f'{s}/acc']:>7.3f}"
            )
    if heads is not None:
        names = ", ".join(f"L{layer}H{head}" for layer, head in heads)
        for s in ("val", "test"):
            if f"{s}/loss_ablated" in results:
                before, after = results[f"{s}/loss"], results[f"{s}/loss_ablated"]
                print(f"{s} without {names} ({cfg.ablate_mode} ablation): loss {after:.4f} ({after - before:+.4f})")
    return results


def main() -> None:
    command("evaluate", run)


if __name__ == "__main__":
    main()
