"""Everything the explorer page needs from a checkpoint, as plain JSON-ready data (no Lightning)."""

from __future__ import annotations

import base64
import json
import logging
import math
import re
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch

from src import rules
from src.data.corpus import first_line, recorded_text
from src.data.datamodule import split_lengths
from src.data.token_cache import open_corpus
from src.model.head_scores import KINDS, MEASURES, THRESHOLD, ProbeTooShort, probe_length, repeated_probe
from src.model.language_model import count_parameters
from src.training.checkpoint import Trained, run_dir_of

# float32 weights above this many bytes are stored as float16 by `weights=auto`, which keeps the
# default model's page (0.70M parameters, 2.8 MB of float32) under 8 MB and halves larger ones.
AUTO_FLOAT32_BYTES = 6_000_000
# The run's stored attention maps (head_scores.json) get at most this many bytes of the page: a run
# with many validations keeps every step's scores, and the maps of evenly spaced steps only.
HEAD_MAPS_BYTES = 2_500_000
HEAD_SCORES_FORMAT = "scratchgpt head scores 1"  # src/training/heads.py's FORMAT
WEIGHT_DTYPES = ("auto", "float32", "float16")
# "Where it fails" scores its excerpt in the browser: at most this many characters (at most 0.8 MB of
# UTF-8 in the page, a tenth of its 8 MB budget; a 212 MB excerpt made a 220 MB page whose view threw
# "RangeError: Invalid array length").
EXCERPT_MAX_CHARS = 200_000


def pack_weights(state_dict: dict[str, torch.Tensor], weights: str = "auto") -> dict[str, Any]:
    """The tensors as one little-endian base64 blob plus {name: [offset in numbers, shape]}."""
    rules.choice("weights", weights, WEIGHT_DTYPES)
    tensors = {name: t.detach().float().cpu().contiguous() for name, t in state_dict.items()}
    total = sum(t.numel() for t in tensors.values())
    dtype = weights if weights != "auto" else ("float32" if 4 * total <= AUTO_FLOAT32_BYTES else "float16")
    index, offset, parts = {}, 0, []
    for name, t in tensors.items():
        index[name] = [offset, list(t.shape)]
        offset += t.numel()
        parts.append(t.flatten().numpy().astype("<f4" if dtype == "float32" else "<f2"))
    blob = np.concatenate(parts).tobytes() if parts else b""
    return {"dtype": dtype, "index": index, "data": base64.b64encode(blob).decode("ascii")}


def validation_text(hparams: dict[str, Any], data_dir: str | Path, chars: int) -> tuple[str, str]:
    """The first `chars` characters of the checkpoint's own validation split (cut as training cut it), and
    where they come from."""
    split = hparams.get("data") or {}
    path = recorded_text(split, data_dir, key="text")
    vocab = list(hparams["tokenizer"]["vocab"])
    tokens = open_corpus(path, data_dir, vocab).tokens
    sizes = split_lengths(len(tokens), split.get("val_fraction", 0.1), split.get("test_fraction", 0.0))
    return split_excerpt(tokens[sizes["train"] : sizes["train"] + sizes["val"]], vocab, path, chars)


def excerpt_of(hparams: dict[str, Any], data_dir: str | Path, text: str | None, chars: int) -> tuple[str, str]:
    """What "Where it fails" scores, and where it comes from: the opening of a user's file (`text=`), else the
    checkpoint's own validation split (if that file still is it: the checkpoint records its sha256)."""
    return file_text(text, chars) if text is not None else validation_text(hparams, data_dir, chars)


def split_excerpt(val: np.ndarray, vocab: list[str], path: str | Path, chars: int) -> tuple[str, str]:
    """The first `chars` ids of a validation split as text, and where they come from."""
    val = val[:chars]
    source = f"the first {len(val):,} characters of the validation split of {Path(path).name}"  # no machine paths
    return "".join(vocab[i] for i in val.tolist()), source


def file_text(path: str | Path, chars: int) -> tuple[str, str]:
    """The opening of a user's text file (`text=`), as the page's excerpt."""
    file = Path(path).expanduser()
    if not file.is_file():
        raise ValueError(f"text={path} does not exist or is not a file: point text= at a UTF-8 text file")
    try:
        with open(file, encoding="utf-8") as f:
            text = f.read(chars)  # the opening only, not the whole file
    except UnicodeDecodeError:
        raise ValueError(f"text={path} is not UTF-8 text: convert it, or leave text= unset") from None
    return text, f"the first {len(text):,} characters of {file.name}"


def run_history(run_dir: Path) -> dict[str, Any] | None:
    """The val/train loss curves and the text samples of the run's TensorBoard events, if they are there."""
    found = sorted((run_dir / "tensorboard").rglob("events.out.tfevents.*"), key=lambda path: (len(path.parts), path))
    if not found:
        return None
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # only when events exist

    logging.getLogger("tensorboard").setLevel(logging.WARNING)  # not "No path found after ..." in the run's log

    accumulator = EventAccumulator(str(found[0].parent), size_guidance={"scalars": 0, "tensors": 0})
    accumulator.Reload()

    def curve(tag: str) -> list[list[float]]:
        if tag not in accumulator.Tags()["scalars"]:
            return []
        points = {e.step: e.value for e in accumulator.Scalars(tag)}  # a resumed run may log a step twice
        return [[step, value] for step, value in sorted(points.items()) if math.isfinite(value)]

    samples = []
    for tag in [t for t in accumulator.Tags()["tensors"] if t.startswith("samples")]:
        for event in accumulator.Tensors(tag):
            text = event.tensor_proto.string_val[0].decode("utf-8", "replace")
            samples.append([event.step, "\n".join(line.removeprefix("    ") for line in text.split("\n"))])
    # the tags src/training/tensorboard.py gives val/loss and train/loss (runs before it: val/loss, train/loss)
    return {
        "val_loss": curve("loss/val") or curve("val/loss"),
        "train_loss": curve("loss/train") or curve("train/loss"),
        "samples": sorted(samples),
    }


def shared_path(path: Path, run_dir: Path) -> str:
    """A path as the page shows it, relative to its run (checkpoints/best.ckpt): the page is made to be
    shared, and a machine's folders mean nothing on another."""
    return str(path.relative_to(run_dir)) if path.is_relative_to(run_dir) else path.name


def run_title(run_dir: Path) -> str:
    """The run as a reader names it: Hydra's <date>/<time> (a sweep job: <date>/<time>/<job>) with its
    date, not the time alone; any other folder by its own name."""
    found = re.search(r"(?:^|/)(\d{4}-\d{2}-\d{2})/([^/]+)(?:/([^/]+))?$", run_dir.as_posix())
    if found is None:
        return run_dir.name
    date, time, job = found.groups()
    return f"{date} {time}" + (f" job {job}" if job else "")


def head_payload(vocab_size: int, context_window: int, run_dir: Path) -> dict[str, Any] | None:
    """What "What each head does" needs: the training callback's repeated probe (its batch and seed: the
    page's scores are the callback's), and the run's snapshots from its head_scores.json if it kept one."""
    try:
        n = probe_length(context_window)
    except ProbeTooShort:
        return None  # a window under 4: no probe, and the view says so
    probe = repeated_probe(vocab_size, context_window)  # (16, 2n), seed 0
    history = None
    path = run_dir / "head_scores.json"
    if path.is_file():
        try:
            stored = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            stored = None
        if isinstance(stored, dict) and stored.get("format") == HEAD_SCORES_FORMAT and stored.get("snapshots"):
            history = {**stored, "snapshots": thin_maps(stored["snapshots"], HEAD_MAPS_BYTES), "file": path.name}
    return {
        "n": n,
        "probe": probe.tolist(),
        "kinds": list(KINDS),
        "measures": list(MEASURES),
        "threshold": THRESHOLD,
        "history": history,
    }


def snapshot_maps(snapshot: dict[str, Any]) -> list[Any]:
    """A snapshot's maps: its attention maps and its circuits' (V x V tables, most of a snapshot's bytes)."""
    return [snapshot.get("maps"), (snapshot.get("circuits") or {}).get("maps")]


def without_maps(snapshot: dict[str, Any]) -> dict[str, Any]:
    """The snapshot with "maps": null, and its circuits' too; its scores, positivity and composition kept."""
    circuits = snapshot.get("circuits")
    return {**snapshot, "maps": None, **({"circuits": {**circuits, "maps": None}} if circuits else {})}


def thin_maps(snapshots: list[dict[str, Any]], budget: int) -> list[dict[str, Any]]:
    """Every snapshot's scores; the maps (attention and circuits) of the last, the first and evenly spaced
    ones between, as many as fit in `budget` bytes of JSON (none for a model whose maps of one step alone
    exceed it). A snapshot whose maps were left out has "maps": null, and so have its circuits."""
    size = max(len(json.dumps(snapshot_maps(s), separators=(",", ":"))) for s in snapshots)
    keep = budget // max(size, 1)
    if keep >= len(snapshots):
        return snapshots
    last = len(snapshots) - 1
    chosen = {last} if keep == 1 else {round(k * last / (keep - 1)) for k in range(keep)} if keep > 1 else set()
    return [s if k in chosen else without_maps(s) for k, s in enumerate(snapshots)]


def page_payload(
    trained: Trained,
    checkpoint: Path,
    excerpt: tuple[str, str],
    prompt: str | None,
    weights: str = "auto",
) -> dict[str, Any]:
    """The JSON the page reads: the model (config, vocabulary, weights), the excerpt, the run's story."""
    run_dir = run_dir_of(checkpoint)
    best = trained.best_val_loss
    text, source = excerpt
    config = {k: v for k, v in asdict(trained.model.cfg).items() if k not in ("fused", "dropout")}
    return {
        "title": run_title(run_dir),
        "checkpoint": shared_path(checkpoint, run_dir),
        "step": trained.global_step,
        "best_val_loss": best if best is not None and math.isfinite(best) else None,
        "parameters": count_parameters(trained.model),
        "config": {"kind": trained.hparams["model"].get("kind", "gpt"), **config},
        "vocab": trained.tokenizer.vocab,
        "weights": pack_weights(trained.model.state_dict(), weights),
        "prompt": prompt if prompt is not None else first_line(text, trained.model.context_window),
        "excerpt": {"text": text, "source": source},
        "history": run_history(run_dir),
        "heads": head_payload(trained.tokenizer.vocab_size, trained.model.context_window, run_dir),
        "ngram": run_ngram(run_dir),
    }


def run_ngram(run_dir: Path) -> dict[str, Any] | None:
    """The n-gram ladder of the run's text, as its result.json holds it (src/data/ngram.py), if it does."""
    try:
        ladder = json.loads((run_dir / "result.json").read_text()).get("ngram")
    except (OSError, ValueError, AttributeError):
        return None
    return ladder if isinstance(ladder, dict) and ladder.get("val") else None
