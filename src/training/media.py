"""What the model writes and where it looks, logged at every validation (to TensorBoard and the other loggers)."""

from __future__ import annotations

import lightning as L
import torch

from src.rules import sample_fits, sampling
from src.training.callbacks import validates_step_zero
from src.training.tensorboard import ATTENTION_TAG


def media_loggers(trainer: L.Trainer) -> list:
    """The loggers that take text samples and pictures (TensorBoard and src/trackers.py's), on
    rank 0; none in a sanity check that is not the run's validation at step 0 (the curves start
    there, and so do the media)."""
    if not trainer.is_global_zero or (trainer.sanity_checking and not validates_step_zero(trainer)):
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
        if not loggers or trainer.state.fn != "fit":
            return
        from src.model.generation import sample_text  # the sampler only once there is a sample to write

        text = sample_text(
            pl_module.model, pl_module.tokenizer, self.prompt, self.max_new_tokens, self.temperature, seed=self.seed
        )
        for logger in loggers:
            logger.log_text_sample("samples", text, trainer.global_step)


class AttentionMaps(L.Callback):
    """One image per layer: every head's attention weights over a fixed prompt.

    The weights come from the plain path (the fused kernel cannot return them), whichever path
    training uses. The figure's axes and labels are drawn once per run (src/plots.AttentionFigure)
    and only the weights are redrawn at each validation, so the images cost milliseconds.
    """

    def __init__(self, prompt: str):
        self.prompt = prompt
        self.figure = None  # AttentionFigure, made at the first validation

    @torch.no_grad()
    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        loggers = media_loggers(trainer)
        if not loggers or trainer.state.fn != "fit":
            return
        from src.plots import AttentionFigure  # matplotlib, only once there is a figure to draw

        model, tokenizer = pl_module.model, pl_module.tokenizer
        prompt = self.prompt[-model.context_window :]
        ids = tokenizer.encode(prompt).to(pl_module.device)
        was_training = model.training
        model.eval()
        maps = model.attention_maps(ids.unsqueeze(0))  # per layer: (1, h, T, T)
        model.train(was_training)
        if self.figure is None:
            self.figure = AttentionFigure(maps[0].shape[1], list(prompt))
        for layer, weights in enumerate(maps):
            title = f"layer {layer} at step {trainer.global_step}"
            image = self.figure.render(weights[0], layer, title)  # (H, W, 3)
            for logger in loggers:
                logger.log_picture(ATTENTION_TAG.format(layer=layer), image, trainer.global_step)

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if self.figure is not None:
            self.figure.close()
            self.figure = None
