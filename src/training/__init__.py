"""Training: the LightningModule, its optimizer and schedule, callbacks and checkpoints. This file holds the
signals that stop a run, once for every place that handles them (a run, a sweep, its workers): Ctrl-C,
`kill`, a closed terminal, SLURM's pre-emption notice. It imports nothing heavy: src/train.py installs its
handler before it imports torch."""

from __future__ import annotations

import os
import signal

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1)


def exit_status(signal_name: str) -> int:
    """128 + the signal's number, as a shell reports a process it ended (`signal_name` may be qualified:
    "second SIGINT"); 143 for a stop that no signal caused (a sweep's main process ended)."""
    name = signal_name.split()[-1] if signal_name else ""
    number = signal.Signals[name] if name in signal.Signals.__members__ else signal.SIGTERM
    return 128 + number


def stop_outside_training(signum: int, frame: object) -> None:
    """Outside training nothing is unsaved: one line, and the process ends at once (an exception could be
    swallowed where the signal lands, e.g. in a finalizer)."""
    what = "interrupted" if signum == signal.SIGINT else signal.Signals(signum).name
    os.write(2, f"error: {what} outside training (where Ctrl-C saves last.ckpt first): stopped\n".encode())
    os._exit(128 + signum)
