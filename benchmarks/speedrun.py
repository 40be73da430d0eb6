"""Two speedrun presets side by side: seconds from process start to val loss <= 1.88, over seeds.

    python -m benchmarks.speedrun --old cpu_speedrun --new cpu_speedrun_modern --rounds 5

Each round runs both presets, in alternating order, with the round's seed: `python -m src.train
experiment=<preset> seed=<round>` as a user types it, the clock running from the process start to
the first validation whose loss is <= 1.88 (the process is stopped there). A run that ends above
the target counts as a miss and is reported. Then the new preset's seconds against the old's:
medians, every round, and Welch's t-test (src/compare.py) with its one-sided p-value that the new
is faster.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from benchmarks.train_speed import TARGET_LOSS, run_ours
from src.compare import welch


def seconds_to_target(preset: str, seed: int, workdir: Path) -> tuple[float | None, float]:
    """Seconds from process start to the first val loss <= TARGET_LOSS (None: never), and the last val loss."""
    record = run_ours([f"experiment={preset}", f"seed={seed}", "sample.max_new_tokens=0"], workdir, TARGET_LOSS)
    crossing = next((t for _, loss, t in record["validations"] if loss <= TARGET_LOSS), None)
    last = record["validations"][-1][1] if record["validations"] else float("nan")
    return (None if crossing is None else crossing - record["start"]), last


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--old", default="cpu_speedrun")
    parser.add_argument("--new", required=True)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", type=Path, help="write every round here")
    args = parser.parse_args()
    seconds: dict[str, list[float]] = {args.old: [], args.new: []}
    rounds = []
    with tempfile.TemporaryDirectory() as workdir:
        for round_ in range(args.rounds):
            order = [args.old, args.new] if round_ % 2 == 0 else [args.new, args.old]
            for preset in order:
                reached, loss = seconds_to_target(preset, round_, Path(workdir))
                rounds.append({"round": round_, "preset": preset, "seed": round_, "seconds": reached, "val_loss": loss})
                shown = "missed" if reached is None else f"{reached:.1f} s"
                print(f"round {round_} {preset:24s} seed {round_}: {shown} (val {loss:.4f})", flush=True)
                if reached is not None:
                    seconds[preset].append(reached)
    old, new = seconds[args.old], seconds[args.new]
    summary = {"rounds": rounds}
    for name, values in ((args.old, old), (args.new, new)):
        if values:
            print(f"{name}: median {statistics.median(values):.1f} s over {len(values)} of {args.rounds} rounds")
    if len(old) >= 2 and len(new) >= 2:
        t, df, p = welch(new, old)
        from scipy import stats

        one_sided = float(stats.t.sf(-t, df))  # P(a difference at least this far below 0 by chance)
        print(
            f"new - old: {statistics.fmean(new) - statistics.fmean(old):+.1f} s, Welch t {t:.2f}, df {df:.1f}, "
            f"two-sided p {p:.2g}, one-sided p (new faster) {one_sided:.2g}"
        )
        summary |= {"t": t, "df": df, "p_two_sided": p, "p_new_faster": one_sided}
    if args.json:
        args.json.write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
