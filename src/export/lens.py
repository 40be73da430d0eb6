"""Our GPT in TransformerLens, for activation caching, patching and the rest of its toolbox (docs/export.md).

TransformerLens 4's model object is the TransformerBridge, booted from a Hugging Face model, so the
route is our GPT -> GPT-2's folder (src/export/hf.py, exact) -> the bridge, whose `run_with_cache`
returns logits equal to ours and every head's attention pattern.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from src.training.checkpoint import Trained, find_checkpoint, load_trained

DEFAULT_LOG_DIR = Path(__file__).resolve().parents[2] / "outputs"
UNKNOWN = "<unk>"


def boot(folder: str | Path, device: str = "cpu") -> Any:
    """The TransformerBridge of a GPT-2 folder written by src.export (local: no network). Booting probes
    the tokenizer with "a", which a vocabulary without it refuses: the bridge's tokenizer maps unknown
    characters to `<unk>`. Our models never saw a BOS token, so to_tokens prepends none."""
    from transformer_lens.model_bridge import TransformerBridge
    from transformers import PreTrainedTokenizerFast

    from src.export.hf import char_tokenizer

    ids = json.loads((Path(folder) / "tokenizer.json").read_text(encoding="utf-8"))["model"]["vocab"]
    probed = char_tokenizer(sorted(ids, key=ids.get), unknown=UNKNOWN)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=probed, unk_token=UNKNOWN, clean_up_tokenization_spaces=False)
    bridge = TransformerBridge.boot_transformers(str(folder), device=device, tokenizer=tokenizer)
    bridge.cfg.default_prepend_bos = False
    return bridge


def transformer_bridge(
    ckpt_path: str | Path | Trained | None = None, log_dir: str | Path = DEFAULT_LOG_DIR, device: str = "cpu"
) -> Any:
    """A trained model (ckpt_path as our commands take it, or one in memory) as TransformerLens's
    TransformerBridge: written to a temporary GPT-2 folder and booted."""
    from src.export.hf import check_gpt2, write_hf

    trained = ckpt_path if isinstance(ckpt_path, Trained) else load_trained(find_checkpoint(ckpt_path, log_dir))
    check_gpt2(trained.hparams["model"], "a TransformerLens model")
    with tempfile.TemporaryDirectory() as folder:
        write_hf(trained.model, trained.tokenizer.vocab, Path(folder))
        return boot(folder, device)
