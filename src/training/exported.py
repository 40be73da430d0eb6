"""format=safetensors: the weights as `model.safetensors` beside a `config.json` that says what they are.

    <out>/model.safetensors   the model's state dict (our parameter names), float32
    <out>/config.json         {"format": "scratchgpt", "model": {...}, "vocabulary": "...", "step": N,
                               "best_val_loss": x, "optimizer": {...}, "data": {...}}

Written by `python -m src.export format=safetensors` (src/export/weights.py). Our commands read the folder
wherever they read a checkpoint (`ckpt_path=<out>`): read_exported turns it back into the dict a
training checkpoint holds, so the model, its tokenizer, the text it was scored on and its step are
the same as in the checkpoint it came from.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

WEIGHTS, CONFIG = "model.safetensors", "config.json"
FORMAT = "scratchgpt"


class ExportedFolderError(ValueError):
    """An exported folder that cannot be read; the message names the fix (read_checkpoint words it as its own)."""


def read_exported(weights: Path) -> dict[str, Any]:
    """A folder written by format=safetensors, as the dict of a training checkpoint (read_checkpoint checks it)."""
    folder = weights.parent
    try:
        from safetensors import SafetensorError
        from safetensors.torch import load_file
    except ImportError:
        raise ExportedFolderError(
            f'{weights} is a safetensors file, and reading it needs the safetensors package: pip install -e ".[hf]"'
        ) from None
    try:
        config = json.loads((folder / CONFIG).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ExportedFolderError(
            f"{folder} has {WEIGHTS} but no {CONFIG}: export it again with python -m src.export format=safetensors"
        ) from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ExportedFolderError(f"{folder / CONFIG} is unreadable or corrupt ({err}): export again") from None
    if not isinstance(config, dict) or config.get("format") != FORMAT:
        raise ExportedFolderError(
            f"{folder / CONFIG} is not a scratchgpt export (a Hugging Face folder?): pass a folder written by "
            f"python -m src.export format=safetensors, or a .ckpt file"
        )
    try:
        state = load_file(str(weights))
    except (SafetensorError, OSError) as err:
        raise ExportedFolderError(f"{weights} is truncated or corrupt ({err}): export the model again") from None
    hparams = {"model": config.get("model"), "tokenizer": {"vocab": config.get("vocabulary")}}
    hparams |= {key: config[key] for key in ("optimizer", "data") if key in config}
    return {
        "hyper_parameters": hparams,
        "state_dict": {f"model.{name}": tensor for name, tensor in state.items()},
        "global_step": config.get("step", 0),
        "best_val_loss": config.get("best_val_loss"),
    }
