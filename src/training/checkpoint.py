"""Finding and loading checkpoints, with errors that say what to do instead of a torch trace. Nothing here
imports Lightning: sampling from a checkpoint needs only torch and the model."""

from __future__ import annotations

import json
import math
import pickle
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from src.data.tokenizer import CharTokenizer
from src.model import build_model, model_config, sizes_of
from src.model.checks import is_int, is_number
from src.model.language_model import CausalLanguageModel
from src.rules import physical_memory


class CheckpointError(ValueError):
    """A checkpoint is missing, unreadable or does not fit; the message names the fix."""


# `python -m src.export format=safetensors` (src/export/weights.py) writes a folder of the weights, our
# parameter names in float32, beside a config.json: {"format": "scratchgpt", "model": {...}, "vocabulary":
# "...", "step": N, "best_val_loss": x, "optimizer": {...}, "data": {...}}. Our commands read it wherever
# they read a checkpoint (read_exported).
WEIGHTS, CONFIG = "model.safetensors", "config.json"
FORMAT = "scratchgpt"


def find_checkpoint(spec: str | Path | None, outputs_dir: str | Path, prefer: str = "best") -> Path:
    """A checkpoint file from what the user typed (prefer="last": one to resume training from).

    - a file: that file;
    - a run directory: its checkpoints/<prefer>.ckpt, else the other of best/last;
    - a folder written by `python -m src.export format=safetensors`: its model.safetensors;
    - "last": the newest last.ckpt under outputs_dir;
    - None: the run under outputs_dir with the newest checkpoint, its <prefer>.ckpt.
    """
    outputs_dir = Path(outputs_dir)
    order = [f"{prefer}.ckpt", "last.ckpt" if prefer == "best" else "best.ckpt"]
    if spec is None or str(spec) == "last":
        pattern = "last.ckpt" if spec == "last" else "*.ckpt"
        newest = max(outputs_dir.glob(f"**/checkpoints/{pattern}"), key=lambda p: p.stat().st_mtime, default=None)
        if newest is None:
            raise CheckpointError(
                f"no checkpoint under {outputs_dir}: train one with `python -m src.train` or pass ckpt_path=<file>"
            )
        if spec == "last":
            return newest
        spec = newest.parent.parent  # the run directory
    path = Path(spec).expanduser()
    if path.is_dir():
        for name in order:
            for candidate in (path / "checkpoints" / name, path / name):
                if candidate.is_file():
                    return candidate
        if (path / WEIGHTS).is_file():
            return resumable(path / WEIGHTS, prefer)
        raise CheckpointError(f"no {' or '.join(order)} in {path}: pass ckpt_path=<a .ckpt file> or a run directory")
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} does not exist: pass ckpt_path=<a .ckpt file> or a run directory")
    return resumable(path, prefer)


def resumable(path: Path, prefer: str) -> Path:
    """An exported model.safetensors holds weights only: training cannot resume from it."""
    if prefer == "last" and path.suffix == ".safetensors":
        raise CheckpointError(
            f"{path} is an exported model: it keeps no optimizer state, step or data position to resume "
            f"from; resume from the run's checkpoints/last.ckpt"
        )
    return path


def read_checkpoint(path: str | Path) -> dict[str, Any]:
    """The checkpoint's dict, refusing truncated files and files that are not our checkpoints.
    An exported model.safetensors reads as the checkpoint it came from."""
    path = Path(path)
    checkpoint = read_exported(path) if path.suffix == ".safetensors" else load_zipped(path)
    hparams = checkpoint.get("hyper_parameters") if isinstance(checkpoint, dict) else None
    if not isinstance(hparams, dict) or "model" not in hparams or "tokenizer" not in hparams:
        raise CheckpointError(f"{path} is not a scratchgpt checkpoint (no model config and tokenizer inside)")
    try:
        vocab_size = CharTokenizer.from_dict(hparams["tokenizer"]).vocab_size
        config = model_config(hparams["model"], vocab_size)
        needed, tables = sizes_of(hparams["model"], vocab_size)  # built on the meta device: no memory
    except (ValueError, TypeError, KeyError) as err:
        raise CheckpointError(
            f"{path} holds a model config no model can be built from ({err}): the checkpoint was edited or "
            f"damaged; use another one, e.g. the run's checkpoints/last.ckpt or best.ckpt"
        ) from None
    state = checkpoint.get("state_dict")
    held = sum(v.numel() for v in state.values() if isinstance(v, torch.Tensor)) if isinstance(state, dict) else 0
    if needed > held:  # before the model is built for real: its size is the file's, not the config's
        raise CheckpointError(
            f"{path}'s model config (model.embedding_dim={config.embedding_dim}, "
            f"model.num_layers={getattr(config, 'num_layers', 1)}) makes a model of at least "
            f"{needed:,} parameters, but the file holds {held:,} weights: the checkpoint was "
            f"edited or damaged; use another one, e.g. the run's checkpoints/last.ckpt or best.ckpt"
        )
    if tables > physical_memory() // 2:  # the position tables are computed, not read: their size is the config's
        raise CheckpointError(
            f"{path}'s model config (model.context_window={config.context_window}) makes position tables of "
            f"{tables / 2**30:,.1f} GiB, more than half this machine's memory: the checkpoint was edited or "
            f"damaged; use another one, e.g. the run's checkpoints/last.ckpt or best.ckpt"
        )
    return checkpoint


def read_exported(weights: Path) -> dict[str, Any]:
    """A folder written by format=safetensors, as the dict of a training checkpoint (read_checkpoint checks it)."""
    folder = weights.parent
    try:
        from safetensors import SafetensorError
        from safetensors.torch import load_file
    except ImportError:
        raise CheckpointError(
            f'{weights} is a safetensors file, and reading it needs the safetensors package: pip install -e ".[hf]"'
        ) from None
    try:
        config = json.loads((folder / CONFIG).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CheckpointError(
            f"{folder} has {WEIGHTS} but no {CONFIG}: export it again with python -m src.export format=safetensors"
        ) from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise CheckpointError(f"{folder / CONFIG} is unreadable or corrupt ({err}): export again") from None
    if not isinstance(config, dict) or config.get("format") != FORMAT:
        raise CheckpointError(
            f"{folder / CONFIG} is not a scratchgpt export (a Hugging Face folder?): pass a folder written by "
            f"python -m src.export format=safetensors, or a .ckpt file"
        )
    try:
        state = load_file(str(weights))
    except (SafetensorError, OSError) as err:
        raise CheckpointError(f"{weights} is truncated or corrupt ({err}): export the model again") from None
    step, best = config.get("step", 0), config.get("best_val_loss")
    if not is_int(step) or step < 0 or not (best is None or is_number(best)):
        raise CheckpointError(
            f"{folder / CONFIG} holds step={step!r}, best_val_loss={best!r}: a step count and a loss (or null) "
            f"were expected; the file was edited or damaged: export the model again"
        )
    hparams = {"model": config.get("model"), "tokenizer": {"vocab": config.get("vocabulary")}}
    hparams |= {key: config[key] for key in ("optimizer", "data") if key in config}
    return {
        "hyper_parameters": hparams,
        "state_dict": {f"model.{name}": tensor for name, tensor in state.items()},
        "global_step": step,
        "best_val_loss": best,
    }


def load_zipped(path: Path) -> Any:
    """What torch.save wrote to `path` (a zip archive), refusing anything else."""
    with open(path, "rb") as f:
        if f.read(4) != b"PK\x03\x04":
            raise CheckpointError(f"{path} is not a checkpoint: pass a .ckpt file written by python -m src.train")
    try:
        # Lightning checkpoints hold plain containers, tensors and numbers: the safe loader reads them.
        return torch.load(path, map_location="cpu", weights_only=True)
    except (EOFError, RuntimeError, pickle.UnpicklingError, zipfile.BadZipFile, OSError):
        raise CheckpointError(
            f"{path} is truncated or corrupt: use another checkpoint, e.g. the run's checkpoints/last.ckpt or best.ckpt"
        ) from None


@dataclass
class Trained:
    """A trained model as a checkpoint stores it: the network, its tokenizer, its hyperparameters (the
    explorer reads the model kind and the text's split there), its optimizer steps."""

    model: CausalLanguageModel
    tokenizer: CharTokenizer
    hparams: dict[str, Any]
    global_step: int
    best_val_loss: float | None = None  # the lowest val/loss of the run when this was saved


BARELY_TRAINED_STEPS = 100  # fewer optimizer steps than this: the samples are still noise


def run_dir_of(path: Path) -> Path:
    """The run directory a checkpoint belongs to (<run>/checkpoints/best.ckpt -> <run>)."""
    return path.parent.parent if path.parent.name == "checkpoints" else path.parent


def describe(path: Path, trained: Trained, chosen: bool) -> list[str]:
    """What a command says on stderr about the checkpoint it uses: which run, how trained, and a
    warning when that is barely at all. `chosen`: found by us (the newest run), not typed."""
    best = trained.best_val_loss if trained.best_val_loss is not None and math.isfinite(trained.best_val_loss) else None
    loss = f", best val loss {best:.4f}" if best is not None else ""
    how = "the newest run: " if chosen else ""
    lines = [f"checkpoint: {how}{path} (step {trained.global_step}{loss})"]
    uniform = math.log(trained.tokenizer.vocab_size)
    if trained.global_step < BARELY_TRAINED_STEPS or (best is not None and best > 0.9 * uniform):
        lines.append(
            f"warning: this model trained {trained.global_step} step(s) (uniform guessing scores a val loss of "
            f"{uniform:.2f}): expect noise; train longer, or pass ckpt_path=<a longer run>"
        )
    return lines


def load_trained(path: str | Path) -> Trained:
    """The model of a training checkpoint (GPTModule keeps it under `model.`), in eval mode."""
    checkpoint = read_checkpoint(path)
    hparams = checkpoint["hyper_parameters"]
    tokenizer = CharTokenizer.from_dict(hparams["tokenizer"])
    model = build_model(hparams["model"], tokenizer.vocab_size)
    weights = {k.removeprefix("model."): v for k, v in checkpoint["state_dict"].items() if k.startswith("model.")}
    try:
        model.load_state_dict(weights)
    except (KeyError, RuntimeError) as err:
        fix = f"{path} has weights that do not fit its own model config ({type(err).__name__})"
        raise CheckpointError(fix) from None
    best = checkpoint.get("best_val_loss")
    best = float(best) if isinstance(best, (int, float)) else None
    return Trained(model.eval(), tokenizer, hparams, checkpoint.get("global_step", 0), best)


def pick_device(device: str) -> torch.device:
    """`auto` (CUDA, else Apple's MPS, else the CPU, as accelerator=auto picks), cpu, mps, cuda or cuda:N."""
    cuda, mps = torch.cuda.is_available(), torch.backends.mps.is_available()
    if device == "auto":
        return torch.device("cuda" if cuda else "mps" if mps else "cpu")
    if device == "mps" and not mps:
        raise ValueError("device=mps asks for Apple's MPS, which this machine lacks: use device=cpu or device=auto")
    kind, _, index = device.partition(":")
    if device in ("cpu", "mps") or (kind == "cuda" and (not index or index.isdigit())):
        if kind == "cuda" and not cuda:
            raise ValueError(f"device={device} asks for a GPU but none is available: use device=cpu or device=auto")
        if kind == "cuda" and index and int(index) >= torch.cuda.device_count():
            raise ValueError(f"device={device}: there are only {torch.cuda.device_count()} GPUs; use device=cuda:0")
        return torch.device(device)
    raise ValueError(f"device={device} is not a device this command runs on: use device=auto, cpu, mps, cuda or cuda:N")
