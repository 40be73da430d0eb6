"""What the model writes and where it looks, at every validation (step 0 included): a sample of text,
the attention maps over a prompt, and every head's scores (docs/heads.md: the tags, the runs per head,
and head_scores.json, the snapshots the explorer page replays)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import lightning as L
import torch
from torch import Tensor

from src.data.corpus import write_atomically
from src.model.ablation import ablation_table
from src.model.circuits import bigram_log_probs, circuits
from src.model.head_scores import KINDS, MEASURES, THRESHOLD, HeadScores, measure_heads, repeated_probe
from src.rules import ConfigError, non_negative_int, of_type, positive_int, sample_fits, sampling
from src.training.callbacks import reported_validation
from src.training.gpt_module import log_at_step
from src.training.tensorboard import ATTENTION_TAG, TensorBoard

FORMAT = "scratchgpt head scores 1"
SCORE_TAG = "score_{measure}/L{layer}H{head}"
IN_CONTEXT_TAG = "score_in_context/{on}"
# The circuits' scalars, in the run's own events (not a run per head); their group sorts after "loss".
COPYING_TAG = "weight_circuits/ov_positivity_L{layer}H{head}"  # each head's OV eigenvalue positivity: +1 copies
K_COMPOSITION_TAG = "weight_circuits/k_composition_max"  # the largest K-composition of any pair of heads
DIRECT_TAG = "weight_circuits/direct_bigram_correlation"
# The CUSTOM SCALARS tab: one chart per measure, a line per head; the circuits' charts beside them.
LAYOUT = {
    "head scores": {measure: ["Multiline", [rf"^score_{measure}/"]] for measure in MEASURES},
    "circuits": {
        "OV copying (positivity)": ["Multiline", [r"^weight_circuits/ov_positivity_"]],
        "largest K-composition": ["Multiline", [r"^weight_circuits/k_composition_"]],
        "direct path vs bigrams": ["Multiline", [r"^weight_circuits/direct_"]],
    },
}
GLANCE_TAG = "maps/heads_at_a_glance"
BIGRAM_TOKENS = 2_000_000  # the direct path is compared with the bigrams of the training text's first tokens


def thousandths(A: Tensor) -> list[list[list[list[int]]]]:
    """(layers of (h, T, T)) -> [layer][head][i][j <= i], weights as integers 0..1000."""
    return [
        [[row[: i + 1] for i, row in enumerate((weights * 1000).round().int().tolist())] for weights in layer]
        for layer in A
    ]


def scaled_maps(M: Tensor) -> tuple[list, list]:
    """Circuits (..., n, n) as integers -1000..1000, thousandths of each map's largest |value|, and those values
    (...): one rounding and one tolist for all of them."""
    scale = M.abs().amax(dim=(-2, -1))
    thousandths = (M / scale.clamp_min(1e-30)[..., None, None] * 1000).round().int()
    return thousandths.tolist(), scale.tolist()


def circuits_snapshot(result: dict[str, Any]) -> dict[str, Any]:
    """head_scores.json's "circuits" of a snapshot (src.model.circuits.circuits, docs/heads.md)."""
    (qk, qk_scale), (ov, ov_scale) = scaled_maps(result["qk"]), scaled_maps(result["ov"])
    direct, direct_scale = scaled_maps(result["direct"]) if result["direct"] is not None else (None, None)
    return {
        "positivity": {key: value.tolist() for key, value in result["positivity"].items()},
        "composition": {key: value.tolist() for key, value in result["composition"].items()},
        "direct_correlation": result["direct_correlation"],
        "maps": {
            "qk": qk,
            "ov": ov,
            "direct": direct,
            "scale": {"qk": qk_scale, "ov": ov_scale, "direct": direct_scale},
        },
    }


def circuits_summary(result: dict[str, Any]) -> dict[str, Any]:
    """result.json's circuit numbers: the largest K-composition and its pair, the most copying head."""
    K, ov = result["composition"]["k"], result["positivity"]["ov"]
    l1, h1, l2, h2 = (int(i) for i in torch.unravel_index(K.argmax(), K.shape))
    layer, head = (int(i) for i in torch.unravel_index(ov.argmax(), ov.shape))
    return {
        "max_k_composition": float(K.max()) if K.numel() and l2 > l1 else None,
        "max_k_composition_pair": f"L{l1}H{h1}->L{l2}H{h2}" if l2 > l1 else None,
        "most_copying_head": f"L{layer}H{head}",
        "most_copying_positivity": float(ov.max()),
        "direct_correlation": result["direct_correlation"],
    }


def snapshot(
    step: int, result: HeadScores, prompt_maps: list[Tensor], val_loss: float | None, found: dict[str, Any]
) -> dict[str, Any]:
    return {
        "step": step,
        "val_loss": val_loss,
        "scores": {measure: result.scores[measure].tolist() for measure in MEASURES},
        "kinds": result.kinds(),
        "in_context": result.in_context,
        "in_context_text": result.in_context_text,
        "maps": {"probe": thousandths(result.probe_maps), "prompt": thousandths(prompt_maps)},
        "circuits": circuits_snapshot(found),
    }


@contextmanager
def evaluating(model: torch.nn.Module, device: torch.device) -> Iterator[None]:
    """Eval mode (no dropout) and, on a CPU, one intra-op thread meanwhile: batches this small gain nothing
    from a second, and on a busy machine two threads waiting for each other took 5-30x longer."""
    was_training, threads = model.training, torch.get_num_threads()
    model.eval()
    if device.type == "cpu":
        torch.set_num_threads(1)
    try:
        yield
    finally:
        model.train(was_training)
        torch.set_num_threads(threads)


def score_heads_now(model: torch.nn.Module, probe: Tensor, text: Tensor | None) -> HeadScores:
    with evaluating(model, probe.device):
        return measure_heads(model, probe, text)


@torch.no_grad()
def prompt_maps(pl_module: L.LightningModule, prompt: str) -> tuple[str, Tensor, list[Tensor]]:
    """The prompt cut to the context window, its ids (T,), and per layer its attention weights
    (1, h, T, T), from the plain path (the fused kernel cannot return them)."""
    prompt = prompt[-pl_module.model.context_window :]
    ids = pl_module.tokenizer.encode(prompt).to(pl_module.device)
    with evaluating(pl_module.model, ids.device):
        return prompt, ids, pl_module.model.attention_maps(ids.unsqueeze(0))


def media_loggers(trainer: L.Trainer) -> list:
    """The loggers that take text and pictures (TensorBoard, src/trackers.py's), on rank 0, at a
    validation of the run."""
    if not trainer.is_global_zero or not reported_validation(trainer):
        return []
    return [logger for logger in trainer.loggers if hasattr(logger, "log_picture")]


class SampleText(L.Callback):
    """A fixed-seed continuation of a fixed prompt, so the text improves step by step, readably."""

    def __init__(self, prompt: str, max_new_tokens: int = 200, temperature: float = 0.8, seed: int = 0):
        sampling("", max_new_tokens, temperature, None, None)
        sample_fits("max_new_tokens", max_new_tokens)
        self.prompt, self.max_new_tokens, self.temperature, self.seed = prompt, max_new_tokens, temperature, seed

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        loggers = media_loggers(trainer)
        if not loggers:
            return
        from src.model.generation import sample_text  # the sampler only once there is a sample to write

        text = sample_text(
            pl_module.model, pl_module.tokenizer, self.prompt, self.max_new_tokens, self.temperature, seed=self.seed
        )
        for logger in loggers:
            logger.log_text_sample("samples", text, trainer.global_step)


class AttentionMaps(L.Callback):
    """One image per layer: every head's attention weights over a fixed prompt. The figure's axes are
    drawn once per run (src/plots.AttentionFigure), only the weights at each validation."""

    def __init__(self, prompt: str):
        self.prompt = prompt
        self.figure = None

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        loggers = media_loggers(trainer)
        if not loggers:
            return
        from src.plots import AttentionFigure  # matplotlib, only once there is a figure to draw

        prompt, _, maps = prompt_maps(pl_module, self.prompt)
        if self.figure is None:
            self.figure = AttentionFigure(maps[0].shape[1], list(prompt))
        for layer, weights in enumerate(maps):
            image = self.figure.render(weights[0], layer, f"layer {layer} at step {trainer.global_step}")  # (H, W, 3)
            for logger in loggers:
                logger.log_picture(ATTENTION_TAG.format(layer=layer), image, trainer.global_step)

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if self.figure is not None:
            self.figure.close()
            self.figure = None


class TrackHeads(L.Callback):
    """Scores every head and reads its circuits (src/model/circuits.py) at each validation: TensorBoard's
    scalars and image, head_scores.json, and result.json's "heads" (summary()) and "ablation". prompt: the
    explorer page's opening text, whose maps each snapshot keeps."""

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
        self.bigrams: Tensor | None = None  # the training text's log p(next | current), for the direct path
        self.snapshots: list[dict[str, Any]] = []
        self.encoded: dict[int, str] = {}  # step -> its snapshot's JSON, encoded once (a snapshot never changes)
        self.last: HeadScores | None = None
        self.last_circuits: dict[str, Any] | None = None
        self.ablation: dict[str, Any] | None = None  # result.json's "ablation": each head's val loss rise
        self.figure = None

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        for logger in trainer.loggers:
            if isinstance(logger, TensorBoard):
                logger.layout.update(LAYOUT)  # written with the loss chart at the first validation
        model = pl_module.model
        self.probe = repeated_probe(pl_module.tokenizer.vocab_size, model.context_window, self.probe_batch, self.seed)
        splits = getattr(trainer.datamodule, "splits", None)
        if splits and "val" in splits:
            T = model.context_window
            windows = min(self.text_windows, len(splits["val"]) // T)
            if windows > 0:
                ids = torch.as_tensor(splits["val"][: windows * T].astype("int64"))
                self.text = ids.view(windows, T)
        text = (splits or {}).get("train")
        if text is not None and len(text) > 1:
            ids = torch.as_tensor(text[:BIGRAM_TOKENS].astype("int64"))
            self.bigrams = bigram_log_probs(ids, pl_module.tokenizer.vocab_size)
        if self.path.is_file():  # a resumed run: the snapshots so far
            try:
                self.snapshots = json.loads(self.path.read_text())["snapshots"]
            except (OSError, ValueError, KeyError, TypeError):
                self.snapshots = []

    @torch.no_grad()
    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not trainer.is_global_zero or self.probe is None or not reported_validation(trainer):
            return
        model, device = pl_module.model, pl_module.device
        text = self.text.to(device) if self.text is not None else None
        result = score_heads_now(model, self.probe.to(device), text)
        with evaluating(model, device):  # one thread, as the scores
            found = circuits(model, self.bigrams)
        self.last, self.last_circuits = result, found
        metrics = {
            SCORE_TAG.format(measure=measure, layer=layer, head=head): value
            for measure in MEASURES
            for layer, row in enumerate(result.scores[measure].tolist())
            for head, value in enumerate(row)
        }
        metrics[IN_CONTEXT_TAG.format(on="repeats")] = result.in_context
        if result.in_context_text is not None:
            metrics[IN_CONTEXT_TAG.format(on="text")] = result.in_context_text
        for layer, row in enumerate(found["positivity"]["ov"].tolist()):
            metrics |= {COPYING_TAG.format(layer=layer, head=head): value for head, value in enumerate(row)}
        closing = circuits_summary(found)
        if closing["max_k_composition"] is not None:
            metrics[K_COMPOSITION_TAG] = closing["max_k_composition"]
        if closing["direct_correlation"] is not None:
            metrics[DIRECT_TAG] = closing["direct_correlation"]
        log_at_step(trainer, metrics)
        self.write_snapshot(trainer, pl_module, result, found)
        self.draw_glance(trainer, result)

    def write_snapshot(
        self, trainer: L.Trainer, pl_module: L.LightningModule, result: HeadScores, found: dict[str, Any]
    ) -> None:
        tokenizer, step = pl_module.tokenizer, trainer.global_step
        prompt, prompt_ids, maps = prompt_maps(pl_module, self.prompt)
        val_loss = trainer.callback_metrics.get("val/loss")
        val_loss = float(val_loss) if val_loss is not None else None
        self.snapshots = [s for s in self.snapshots if s["step"] < step]
        self.snapshots.append(snapshot(step, result, [A[0] for A in maps], val_loss, found))
        probe = self.probe[0].tolist()
        layers, heads = result.scores["induction"].shape
        content = {
            "format": FORMAT,
            "kinds": list(KINDS),
            "measures": list(MEASURES),
            "threshold": THRESHOLD,
            "layers": layers,
            "heads": heads,
            "probe": {"n": len(probe) // 2, "tokens": probe, "text": tokenizer.decode(probe)},
            "prompt": {"tokens": prompt_ids.tolist(), "text": prompt},
            "snapshots": [],  # joined in below
        }
        # json.dumps, not json.dump: dumps uses json's C encoder (docs/heads.md, "What it costs"). Each
        # snapshot is encoded once, at its validation: the file is the header and the snapshots joined.
        self.encoded[step] = json.dumps(self.snapshots[-1], separators=(",", ":"))
        snapshots = [self.encoded.setdefault(s["step"], json.dumps(s, separators=(",", ":"))) for s in self.snapshots]
        header = json.dumps(content, separators=(",", ":"))
        write_atomically(self.path, header[: -len("[]}")] + "[" + ",".join(snapshots) + "]}")

    def draw_glance(self, trainer: L.Trainer, result: HeadScores) -> None:
        loggers = media_loggers(trainer)
        if not loggers:
            return
        from src.plots import HeadsFigure  # matplotlib, only once there is a figure to draw

        if self.figure is None:
            layers, heads = result.scores["induction"].shape
            self.figure = HeadsFigure(layers, heads)
        image = self.figure.render(result, f"heads at step {trainer.global_step}")
        for logger in loggers:
            logger.log_picture(GLANCE_TAG, image, trainer.global_step)

    def ablate_each_head(self, model: torch.nn.Module) -> dict[str, Any] | None:
        """result.json's "ablation": the loss on the validation windows the in-context score reads, and how
        much it rises with each head zero-ablated alone (src/model/ablation.py). None without those windows."""
        if self.text is None:
            return None
        device = next(model.parameters()).device
        with evaluating(model, device):
            self.ablation = ablation_table(model, self.text.to(device))
        return self.ablation

    def ablation_line(self, shown: int = 6) -> str | None:
        """The run's closing line on what each head is worth: the largest rises first."""
        if self.ablation is None:
            return None
        rises = [
            (r, f"L{layer}H{head}") for layer, row in enumerate(self.ablation["rise"]) for head, r in enumerate(row)
        ]
        rises.sort(reverse=True)
        listed = ", ".join(f"{name} {rise:+.3f}" for rise, name in rises[:shown])
        more = f", and {len(rises) - shown} more" if len(rises) > shown else ""
        return (
            f"val loss {self.ablation['loss']:.4f} on {self.ablation['windows']} windows rises without each head "
            f"(zero ablation): {listed}{more} (result.json's ablation)"
        )

    def became(self) -> list[dict[str, Any]]:
        """Each head that became a kind, with the first validation at which it was one, earliest first."""
        first: dict[tuple[int, int, str], int] = {}
        for s in self.snapshots:
            for layer, row in enumerate(s["kinds"]):
                for head, kind in enumerate(row):
                    if kind is not None:
                        first.setdefault((layer, head, kind), s["step"])
        found = [
            {"layer": layer, "head": head, "kind": kind, "step": step} for (layer, head, kind), step in first.items()
        ]
        return sorted(found, key=lambda b: (b["step"], b["layer"], b["head"]))

    def became_line(self) -> str | None:
        """The run's closing line on its heads: when each first became a kind (docs/heads.md)."""
        became = self.became()
        if not became:
            return None
        shown = [
            f"layer {b['layer']} head {b['head']} {b['kind'].replace('_', '-')} at step {b['step']}" for b in became
        ]
        more = f", and {len(shown) - 6} more (result.json)" if len(shown) > 6 else ""
        return "heads that became a kind: " + "; ".join(shown[:6]) + more

    def summary(self) -> dict[str, Any] | None:
        """result.json's "heads": the last validation's counts and best scores, every head's scores, and when
        each head first became a kind."""
        if self.last is None:
            return None
        scores = {m: self.last.scores[m].tolist() for m in MEASURES}
        found = self.last_circuits
        circuit_numbers = circuits_summary(found) if found is not None else {}
        positivity = {key: value.tolist() for key, value in found["positivity"].items()} if found else None
        return {
            **self.last.summary(),
            **circuit_numbers,
            "scores": scores,
            "positivity": positivity,
            "became": self.became(),
        }
