"""`python -m src.export [ckpt_path=...] format=safetensors|hf|transformerlens out=<folder>` (docs/export.md).

The folder is written beside `out` under a temporary name, checked (a GPT-2 folder is loaded back
and its logits compared with ours), then renamed to `out`: it appears whole or not at all.
"""

from __future__ import annotations

import errno
import importlib.util
import os
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig

from src import rules
from src.model.checks import setting
from src.run.cli import command
from src.training.checkpoint import Trained, describe, find_checkpoint, load_trained, run_dir_of

FORMATS = ("safetensors", "hf", "transformerlens")
# The packages each format needs, and the extra of pyproject.toml that installs them.
NEEDS = {
    "safetensors": (("safetensors",), "hf"),
    "hf": (("safetensors", "transformers", "tokenizers"), "hf"),
    "transformerlens": (("safetensors", "transformers", "tokenizers", "transformer_lens"), "interp"),
}
TOLERANCE = 1e-4  # the largest logit difference an exported GPT-2 may show (the tests ask 1e-5)


@dataclass
class ExportSchema:
    ckpt_path: str | None = setting(
        None, "a .ckpt file, a run directory (its best.ckpt) or last; null = the newest run under outputs/"
    )
    format: str = setting(
        "safetensors", "safetensors (our commands read it back) | hf (transformers' GPT-2) | transformerlens"
    )
    out: str | None = setting(
        None, "the folder to write (must not exist, or be empty); null = export-<format> in the run directory"
    )
    paths: Any = setting(None, "where the data and the runs are kept (conf/paths)")


ConfigStore.instance().store(name="export_schema", node=ExportSchema)  # conf/export.yaml names it


def partial_of(out: Path) -> Path:
    return out.with_name(f".{out.name}.partial-{os.getpid()}")


def check_out(out: Path) -> None:
    """Refuse an `out` the folder cannot be written to, before any work."""
    if out.exists() and not out.is_dir():
        raise ValueError(f"out={out} is a file: give a folder that does not exist yet")
    if out.is_dir() and any(out.iterdir()):
        raise ValueError(f"out={out} already holds files: choose a new folder, or remove it first")
    if not out.parent.is_dir():
        raise ValueError(f"cannot write out={out}: the folder {out.parent} does not exist")
    probe = partial_of(out)
    try:
        probe.mkdir()
        probe.rmdir()
    except OSError as err:
        raise ValueError(f"cannot write out={out}: {err.strerror}; choose another out=<folder>") from None


def write_atomically(out: Path, write: Callable[[Path], None]) -> None:
    """write(folder) into a temporary folder beside `out`, then rename it to `out` (absent or empty)."""
    partial = partial_of(out)
    partial.mkdir()
    try:
        write(partial)
        try:
            os.replace(partial, out)
        except OSError as err:
            if err.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
            raise ValueError(
                f"out={out} was filled by another export while this one ran (its files are kept): "
                f"choose a new folder for this one"
            ) from None
    finally:
        shutil.rmtree(partial, ignore_errors=True)


def check_same_logits(ours: torch.Tensor, theirs: torch.Tensor, what: str) -> None:
    gap = (ours - theirs).abs().max().item()
    if not gap <= TOLERANCE:
        raise RuntimeError(f"{what} gives logits {gap:.2e} away from ours (allowed {TOLERANCE}): nothing was written")


def write_gpt2(trained: Trained, folder: Path, lens: bool) -> None:
    """The GPT-2 folder, loaded back (by the TransformerBridge too when `lens`) and compared with ours."""
    from transformers import GPT2LMHeadModel

    from src.export.hf import write_hf

    write_hf(trained.model, trained.tokenizer.vocab, folder)
    generator = torch.Generator().manual_seed(0)  # two full windows of ids: (2, T)
    ids = torch.randint(0, trained.tokenizer.vocab_size, (2, trained.model.context_window), generator=generator)
    with torch.no_grad():
        ours, _ = trained.model(ids)
        check_same_logits(ours, GPT2LMHeadModel.from_pretrained(folder).eval()(ids).logits, "GPT2LMHeadModel")
        if lens:
            from src.export.lens import boot

            check_same_logits(ours, boot(folder).run_with_cache(ids)[0], "TransformerBridge")


def run(cfg: DictConfig) -> Path:
    rules.choice("format", cfg.format, FORMATS)
    packages, extra = NEEDS[cfg.format]
    missing = [p for p in packages if importlib.util.find_spec(p) is None]
    if missing:
        raise ValueError(f'format={cfg.format} needs {", ".join(missing)}: pip install -e ".[{extra}]"')
    path = find_checkpoint(cfg.ckpt_path, cfg.paths.log_dir)
    out = Path(cfg.out).expanduser() if cfg.out is not None else run_dir_of(path) / f"export-{cfg.format}"
    check_out(out)
    trained = load_trained(path)
    if cfg.format != "safetensors":
        from src.export.hf import check_gpt2

        check_gpt2(trained.hparams["model"], f"format={cfg.format}")
    print("\n".join(describe(path, trained, chosen=cfg.ckpt_path is None)), file=sys.stderr)
    trained.model.float().eval()
    if cfg.format == "safetensors":
        from src.export.weights import write_safetensors

        write_atomically(out, lambda folder: write_safetensors(trained, folder))
    else:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # everything is local: never ask the Hub
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        write_atomically(out, lambda folder: write_gpt2(trained, folder, lens=cfg.format == "transformerlens"))
    folder = repr(str(out))
    window = (
        f"its context window is n_positions={trained.model.context_window}: "
        "generate() stops there, longer text slides the window (docs/export.md)"
    )
    hint = {
        "safetensors": f"python -m src.generate ckpt_path={out}",
        "hf": (
            "from transformers import GPT2LMHeadModel, PreTrainedTokenizerFast; "
            f"model = GPT2LMHeadModel.from_pretrained({folder}); "
            f"tokenizer = PreTrainedTokenizerFast.from_pretrained({folder})  # {window}"
        ),
        # TransformerBridge.boot_transformers alone prepends a BOS id past our vocabulary: boot() does not
        "transformerlens": f"from src.export.lens import boot; bridge = boot({folder})  # {window}",
    }[cfg.format]
    print(f"wrote {out} ({cfg.format}); open it with: {hint}")
    return out


def main() -> None:
    command("export", run)


if __name__ == "__main__":
    main()
