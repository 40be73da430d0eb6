"""Our GPT in TransformerLens, for activation caching, patching and the rest of its toolbox.

TransformerLens 4 removed HookedTransformer; the model object it recommends is the
TransformerBridge, booted from a Hugging Face model (`TransformerBridge.boot_transformers`). So
the route is: our GPT -> GPT-2's folder (src/export/hf.py, exact) -> the bridge, whose
`run_with_cache` returns logits equal to ours and every head's attention pattern.

    from src.export.lens import transformer_bridge
    bridge = transformer_bridge("outputs/2026-11-24/17-26-00")       # a run dir, .ckpt or export folder
    logits, cache = bridge.run_with_cache(bridge.to_tokens("ROMEO:", prepend_bos=False))
    cache["pattern", 0]                                             # (batch, heads, T, T)

`python -m src.export format=transformerlens out=<folder>` writes the same GPT-2 folder, checked by
booting it: `TransformerBridge.boot_transformers("<folder>")` opens it without this project.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from src.training.checkpoint import Trained, find_checkpoint, load_trained

DEFAULT_LOG_DIR = Path(__file__).resolve().parents[2] / "outputs"


def boot(folder: str | Path, device: str = "cpu") -> Any:
    """The TransformerBridge of a GPT-2 folder on this machine (no network: the folder is local)."""
    from transformer_lens.model_bridge import TransformerBridge

    return TransformerBridge.boot_transformers(str(folder), device=device)


def transformer_bridge(
    ckpt_path: str | Path | None = None, log_dir: str | Path = DEFAULT_LOG_DIR, device: str = "cpu"
) -> Any:
    """A trained model as TransformerLens's TransformerBridge, ready for run_with_cache.

    ckpt_path as our commands take it: a .ckpt file, a run directory, an export folder, or None for
    the newest run under log_dir. Only model=gpt has a GPT-2 form (src/export/hf.py says why).
    """
    return bridge_of(load_trained(find_checkpoint(ckpt_path, log_dir)), device)


def bridge_of(trained: Trained, device: str = "cpu") -> Any:
    """The TransformerBridge of a model in memory (written to a temporary GPT-2 folder and booted)."""
    from src.export.hf import check_gpt2, write_hf

    check_gpt2(trained.hparams["model"], "a TransformerLens model")
    with tempfile.TemporaryDirectory() as folder:
        write_hf(trained.model, trained.tokenizer.vocab, Path(folder))
        return boot(folder, device)
