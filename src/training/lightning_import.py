"""Imported first by the commands that use Lightning: it imports Lightning without scipy.signal, a large
share of start-up (BENCHMARKS.md, "Start-up") that nothing here uses.

torchmetrics imports scipy.signal only to add `scipy.signal.hamming` back for an old audio library. While
it loads, `scipy.signal` is a placeholder that has `hamming`, so the patch is skipped; afterwards
`import scipy.signal` loads the real module. tests/training/test_lightning_import.py fails when
torchmetrics stops importing scipy.signal (then this module can go) or when this stops working.
"""

from __future__ import annotations

import sys
import types


def import_lightning() -> None:
    """Import lightning (and with it torchmetrics) without loading scipy.signal."""
    if "torchmetrics" in sys.modules or "scipy.signal" in sys.modules:
        return
    try:
        import scipy  # the package alone: milliseconds
    except ImportError:  # torchmetrics then skips scipy.signal by itself
        import lightning  # noqa: F401

        return
    placeholder = types.ModuleType("scipy.signal", "stands in for scipy.signal while torchmetrics loads")
    placeholder.hamming = None  # torchmetrics patches hamming in only where it is missing
    sys.modules["scipy.signal"] = placeholder
    try:
        import lightning  # noqa: F401
    finally:
        if sys.modules.get("scipy.signal") is placeholder:
            del sys.modules["scipy.signal"]
        if scipy.__dict__.get("signal") is placeholder:
            del scipy.signal


import_lightning()
