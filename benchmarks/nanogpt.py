"""nanoGPT beside us: its documented CPU run and its data, shared by the speed and sweep benchmarks.

nanoGPT's code is not part of this repository: the benchmarks take the path of a checkout.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
# nanoGPT's documented CPU run of train_shakespeare_char ("baby GPT"), as the issue measured it.
NANOGPT_ARGS = [
    "config/train_shakespeare_char.py",
    "--device=cpu",
    "--compile=False",
    "--eval_iters=20",
    "--log_interval=1",
    "--block_size=64",
    "--batch_size=12",
    "--n_layer=4",
    "--n_head=4",
    "--n_embd=128",
    "--lr_decay_iters=2000",
    "--dropout=0.0",
]


def prepare_nanogpt_data(nanogpt: Path) -> None:
    """nanoGPT's shakespeare_char format (uint16 ids of the sorted characters, 90/10 split)."""
    out = nanogpt / "data" / "shakespeare_char"
    if (out / "train.bin").exists() and (out / "meta.pkl").exists():
        return
    text = (ROOT / "data" / "tinyshakespeare" / "input.txt").read_text()
    chars = sorted(set(text))
    stoi = {ch: i for i, ch in enumerate(chars)}
    ids = np.array([stoi[ch] for ch in text], dtype=np.uint16)
    n = int(0.9 * len(ids))
    ids[:n].tofile(out / "train.bin")
    ids[n:].tofile(out / "val.bin")
    with open(out / "meta.pkl", "wb") as f:
        pickle.dump({"vocab_size": len(chars), "itos": dict(enumerate(chars)), "stoi": stoi}, f)
