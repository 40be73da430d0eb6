"""What each head does, tracked while the model trains: scores at every validation, step 0 included.

At each validation (the one at step 0 too) `TrackHeads` scores every head on the fixed repeated
probe (src/model/head_scores.py: previous-token, duplicate-token, induction, first-token, mean
attention distance, and the model's in-context scores) and writes:

- TensorBoard: `score_<measure>/L<layer>H<head>` scalars, which src/training/tensorboard.py
  writes as `score_<measure>/layer_<layer>` of a run per head (`head_<h>`), so that a chart's
  heads differ in colour: a chart per measure and layer on TIME SERIES, one chart per measure
  with every head on the CUSTOM SCALARS tab ("head scores": a colour per head, a marker per
  layer); `score_in_context/repeats` and `score_in_context/text` (after the `loss` group, whose
  first row stays train and val loss); `maps/heads_at_a_glance`, an image of the layers x heads
  grid coloured by each head's kind;
- `<run dir>/head_scores.json`, rewritten at each validation, which the explorer page replays:

    {
      "format": "scratchgpt head scores 1",
      "kinds": ["previous_token", "duplicate_token", "induction", "first_token"],
      "measures": [...the four kinds..., "attention_distance"],
      "threshold": 0.4,                  # a head is of a kind when that score is its strongest and >= this
      "layers": L, "heads": H,
      "probe": {"n": n, "tokens": [2n ids], "text": "the same as characters"},   # its first row
      "prompt": {"tokens": [T ids], "text": "..."},    # the explorer page's opening prompt, cropped to the window
      "snapshots": [                                   # one per validation, in step order
        {"step": 0,
         "val_loss": 4.17 | null,
         "scores": {measure: [[H floats] for each of L layers]},
         "kinds": [[kind or null for each head] for each layer],
         "in_context": float,                          # probe: loss on the 2nd copy - on the 1st
         "in_context_text": float | null,              # validation text: late positions - early
         "maps": {"probe": M, "prompt": M}}            # M[layer][head][i] = row i of the weights,
      ]                                                #   keys 0..i only, in thousandths (ints 0..1000)
    }

  A resumed run keeps the snapshots of the steps before it and carries on.
- result.json's "heads" (train.py): the last validation's summary (heads of each kind, best
  induction, in-context scores) and its per-head scores; a sweep's summary.md reads them.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import lightning as L
import torch
from torch import Tensor

from src.model.head_scores import KINDS, MEASURES, THRESHOLD, HeadScores, measure_heads, repeated_probe
from src.rules import ConfigError, non_negative_int, of_type, positive_int
from src.training.callbacks import validates_step_zero
from src.training.gpt_module import log_at_step
from src.training.tensorboard import TensorBoard

FORMAT = "scratchgpt head scores 1"
SCORE_TAG = "score_{measure}/L{layer}H{head}"
IN_CONTEXT_TAG = "score_in_context/{on}"  # not in the group `loss`: the first row of TIME SERIES is train and val loss
# The CUSTOM SCALARS tab: one chart per measure, a line per head (the tags are matched by regex).
LAYOUT = {"head scores": {measure: ["Multiline", [rf"^score_{measure}/"]] for measure in MEASURES}}
GLANCE_TAG = "maps/heads_at_a_glance"


def thousandths(A: Tensor) -> list[list[list[list[int]]]]:
    """(layers of (h, T, T)) -> [layer][head][i][j <= i], weights as integers 0..1000."""
    return [
        [[row[: i + 1] for i, row in enumerate((weights * 1000).round().int().tolist())] for weights in layer]
        for layer in A
    ]


def snapshot(step: int, result: HeadScores, prompt_maps: list[Tensor], val_loss: float | None) -> dict[str, Any]:
    return {
        "step": step,
        "val_loss": val_loss,
        "scores": {measure: result.scores[measure].tolist() for measure in MEASURES},
        "kinds": result.kinds(),
        "in_context": result.in_context,
        "in_context_text": result.in_context_text,
        "maps": {"probe": thousandths(result.probe_maps), "prompt": thousandths(prompt_maps)},
    }


def write_json(path: Path, content: dict[str, Any]) -> None:
    """Whole or not at all: a reader (the explorer, a resumed run) never sees half a file.

    json.dumps, not json.dump: dump streams through json's pure-Python encoder, dumps uses its C
    one (docs/heads.md, "What it costs", has the times), and the file is written again, all of
    it, at every validation."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(content, separators=(",", ":"))
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".head_scores-")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@contextmanager
def one_thread(device: torch.device) -> Iterator[None]:
    """On a CPU, torch's intra-op threads set to one meanwhile: batches this small gain nothing from
    a second, and on a busy machine two threads waiting for each other took 5-30x longer (the
    reason validation scores its parts single-threaded too, src/training/scoring.py)."""
    if device.type != "cpu":
        yield
        return
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def score_heads_now(model: torch.nn.Module, probe: Tensor, text: Tensor | None) -> HeadScores:
    """measure_heads as the callback runs it (one_thread)."""
    with one_thread(probe.device):
        return measure_heads(model, probe, text)


class TrackHeads(L.Callback):
    """Scores every head at each validation; see the module docstring for what it writes.

    probe_batch: repeated random strings the scores average over; text_windows: validation
    windows of the in-context text score; seed: the probe's; prompt: the explorer page's opening
    text (the sample's prompt unless set), whose attention maps each snapshot keeps.
    """

    def __init__(self, prompt: str, path: str | Path, probe_batch: int = 16, text_windows: int = 16, seed: int = 0):
        positive_int("callbacks.head_scores.probe_batch", probe_batch)
        positive_int("callbacks.head_scores.text_windows", text_windows)
        non_negative_int("callbacks.head_scores.seed", seed)
        of_type("callbacks.head_scores.path", path, (str, Path))
        if not str(path).strip() or Path(path).is_dir():
            key = "callbacks.head_scores.path"
            raise ConfigError(f"{key} must name a file, got {str(path)!r}: e.g. RUN_DIR/head_scores.json")
        self.prompt, self.path = prompt, Path(path)
        self.probe_batch, self.text_windows, self.seed = probe_batch, text_windows, seed
        self.probe: Tensor | None = None
        self.text: Tensor | None = None
        self.snapshots: list[dict[str, Any]] = []
        self.last: HeadScores | None = None
        self.figure = None

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        for logger in trainer.loggers:
            if isinstance(logger, TensorBoard):
                logger.layout.update(LAYOUT)  # written with the loss chart at the first validation
        model = pl_module.model
        self.probe = repeated_probe(pl_module.tokenizer.vocab_size, model.context_window, self.probe_batch, self.seed)
        splits = getattr(trainer.datamodule, "splits", None) if trainer.datamodule is not None else None
        if splits and "val" in splits:
            T = model.context_window
            windows = min(self.text_windows, len(splits["val"]) // T)
            if windows > 0:
                ids = torch.as_tensor(splits["val"][: windows * T].astype("int64"))
                self.text = ids.view(windows, T)
        if self.path.is_file():  # a resumed run: the snapshots so far
            try:
                self.snapshots = json.loads(self.path.read_text())["snapshots"]
            except (OSError, ValueError, KeyError, TypeError):
                self.snapshots = []

    @torch.no_grad()
    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.state.fn != "fit" or not trainer.is_global_zero or self.probe is None:
            return
        if trainer.sanity_checking and not validates_step_zero(trainer):
            return
        model, device = pl_module.model, pl_module.device
        text = self.text.to(device) if self.text is not None else None
        result = score_heads_now(model, self.probe.to(device), text)
        self.last = result
        metrics = {
            SCORE_TAG.format(measure=measure, layer=layer, head=head): value
            for measure in MEASURES
            for layer, row in enumerate(result.scores[measure].tolist())
            for head, value in enumerate(row)
        }
        metrics[IN_CONTEXT_TAG.format(on="repeats")] = result.in_context
        if result.in_context_text is not None:
            metrics[IN_CONTEXT_TAG.format(on="text")] = result.in_context_text
        log_at_step(trainer, metrics)
        self.write_snapshot(trainer, pl_module, result)
        self.draw_glance(trainer, result)

    def write_snapshot(self, trainer: L.Trainer, pl_module: L.LightningModule, result: HeadScores) -> None:
        model, tokenizer, step = pl_module.model, pl_module.tokenizer, trainer.global_step
        prompt = self.prompt[-model.context_window :]
        prompt_ids = tokenizer.encode(prompt).to(pl_module.device)
        was_training = model.training
        model.eval()
        with one_thread(prompt_ids.device):
            prompt_maps = [A[0] for A in model.attention_maps(prompt_ids.unsqueeze(0))]
        model.train(was_training)
        val_loss = trainer.callback_metrics.get("val/loss")
        self.snapshots = [s for s in self.snapshots if s["step"] < step]
        self.snapshots.append(snapshot(step, result, prompt_maps, float(val_loss) if val_loss is not None else None))
        probe = self.probe[0].tolist()
        layers, heads = result.scores["induction"].shape
        write_json(
            self.path,
            {
                "format": FORMAT,
                "kinds": list(KINDS),
                "measures": list(MEASURES),
                "threshold": THRESHOLD,
                "layers": layers,
                "heads": heads,
                "probe": {"n": len(probe) // 2, "tokens": probe, "text": tokenizer.decode(probe)},
                "prompt": {"tokens": prompt_ids.tolist(), "text": prompt},
                "snapshots": self.snapshots,
            },
        )

    def draw_glance(self, trainer: L.Trainer, result: HeadScores) -> None:
        loggers = [logger for logger in trainer.loggers if hasattr(logger, "log_picture")]  # as media_loggers
        if not loggers:
            return
        from src.plots import HeadsFigure  # matplotlib, only once there is a figure to draw

        if self.figure is None:
            layers, heads = result.scores["induction"].shape
            self.figure = HeadsFigure(layers, heads)
        image = self.figure.render(result, f"heads at step {trainer.global_step}")
        for logger in loggers:
            logger.log_picture(GLANCE_TAG, image, trainer.global_step)

    def summary(self) -> dict[str, Any] | None:
        """result.json's "heads": the last validation's counts and best scores, and every head's scores."""
        if self.last is None:
            return None
        return {**self.last.summary(), "scores": {m: self.last.scores[m].tolist() for m in MEASURES}}

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if self.figure is not None:
            self.figure.close()
            self.figure = None
