"""format=safetensors: the weights as `model.safetensors` beside a `config.json` that says what they are;
src/training/checkpoint.py reads such a folder back wherever a checkpoint is read."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from src.training.checkpoint import CONFIG, FORMAT, WEIGHTS, Trained


def export_config(trained: Trained) -> dict[str, Any]:
    """config.json: the model config, the vocabulary, the run's step and val loss, and the settings
    the commands read back (the optimizer's, for a GPTModule; the text and its split, for evaluate)."""
    hparams = trained.hparams
    return {
        "format": FORMAT,
        "model": hparams["model"],
        "vocabulary": "".join(trained.tokenizer.vocab),
        "step": trained.global_step,
        "best_val_loss": trained.best_val_loss,
        **{key: hparams[key] for key in ("optimizer", "data") if key in hparams},
    }


def write_safetensors(trained: Trained, folder: Path) -> None:
    from safetensors.torch import save_file

    state = {name: tensor.detach().cpu().contiguous() for name, tensor in trained.model.state_dict().items()}
    save_file(state, str(folder / WEIGHTS), metadata={"format": "pt"})
    text = json.dumps(export_config(trained), indent=2, ensure_ascii=False)
    (folder / CONFIG).write_text(text + "\n", encoding="utf-8")
