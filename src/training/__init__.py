"""Training: the LightningModule, its optimizer and schedule, callbacks and checkpoints."""
