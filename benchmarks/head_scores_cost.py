"""`python -m benchmarks.head_scores_cost [--rounds N]`: what the head scores add to one validation,
at the default config (4 layers, 4 heads, window 64, Tiny Shakespeare's whole val split).

Each round times, in turn: one validation pass as a run makes it (`trainer.validate` on the run
that src/train.py's build() makes), the scores (src/training/heads.score_heads_now on the probe
and the validation windows, as TrackHeads calls it), the circuits (src/model/circuits.circuits with
the training text's bigrams), the snapshot (the opening prompt's maps and head_scores.json written)
and the heads-at-a-glance image. Medians over the rounds; every round printed, and the bytes of one
snapshot in head_scores.json, with and without its circuits. Run it under `flock -x /work/MEASURE` (the
machine to itself) for a figure worth reporting.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import tempfile
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    import src.training.lightning_import  # noqa: F401
    from src.model.circuits import circuits
    from src.run import preflight
    from src.run.cli import compose
    from src.train import build
    from src.training.heads import TrackHeads, circuits_snapshot, evaluating, score_heads_now
    from tests.helpers import shakespeare_file

    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    out = Path(tempfile.mkdtemp())
    cfg = compose(
        "train", [f"data.path={shakespeare_file()}", f"paths.output_dir={out}", "progress_bar=false", "~logger"]
    )
    plan = preflight.plan(cfg)
    datamodule, lit, trainer = build(cfg, plan)
    tracker = next(c for c in trainer.callbacks if isinstance(c, TrackHeads))
    trainer.validate(lit, datamodule=datamodule, verbose=False)  # warm-up; sets trainer.datamodule
    tracker.setup(trainer, lit, "fit")
    rows = []
    for r in range(args.rounds):
        t0 = time.perf_counter()
        trainer.validate(lit, datamodule=datamodule, verbose=False)
        t1 = time.perf_counter()
        result = score_heads_now(lit.model, tracker.probe, tracker.text)
        t2 = time.perf_counter()
        with evaluating(lit.model, lit.device):  # as TrackHeads computes them
            found = circuits(lit.model, tracker.bigrams)
        t_circuits = time.perf_counter()
        tracker.write_snapshot(trainer, lit, result, found)
        t3 = time.perf_counter()
        from src.plots import HeadsFigure

        figure = tracker.figure or HeadsFigure(*result.scores["induction"].shape)
        tracker.figure = figure
        figure.render(result, "heads")
        t4 = time.perf_counter()
        json.dumps(circuits_snapshot(found), separators=(",", ":"))  # the circuits' share of the snapshot
        t5 = time.perf_counter()
        rows.append((t1 - t0, t2 - t1, t_circuits - t2, t3 - t_circuits, t4 - t3, t5 - t4))
        print(
            f"round {r + 1}: validation {t1 - t0:.3f} s | scores {1000 * (t2 - t1):.1f} ms "
            f"| circuits {1000 * (t_circuits - t2):.1f} ms | snapshot {1000 * (t3 - t_circuits):.1f} ms "
            f"| glance image {1000 * (t4 - t3):.1f} ms | the circuits' share of the snapshot {1000 * (t5 - t4):.1f} ms",
            flush=True,
        )
    val, scores, found, snap, image, share = (statistics.median(col) for col in zip(*rows, strict=True))
    print(
        f"median of {args.rounds}: validation {val:.3f} s; scores {1000 * scores:.1f} ms "
        f"({100 * scores / val:.2f} %); circuits {1000 * found:.1f} ms ({100 * found / val:.2f} %); "
        f"+ snapshot {1000 * snap:.1f} ms ({100 * (scores + found + snap) / val:.2f} %); "
        f"+ glance image {1000 * image:.1f} ms ({100 * (scores + found + snap + image) / val:.2f} %); the circuits "
        f"and their share of the snapshot {1000 * (found + share):.1f} ms ({100 * (found + share) / val:.2f} %)"
    )
    last = tracker.snapshots[-1]
    whole, circuit_maps = (len(json.dumps(x, separators=(",", ":"))) for x in (last, last["circuits"]["maps"]))
    print(f"one snapshot in head_scores.json: {whole:,} bytes, of which the circuits' maps {circuit_maps:,}")


if __name__ == "__main__":
    main()
