"""`python -m benchmarks.induction_circuits RUN_DIR [RUN_DIR ...]`: how the circuits of a run's induction head
move while its induction score jumps (docs/heads.md, "What each head computes").

For each run (an `experiment=induction_heads` run dir with its head_scores.json): the head that scores highest
on induction at the last snapshot, and at each validation its induction score, its QK and OV positivity, the
z-score of its QK circuit's diagonal (same token as query and key: with smeared keys the key's previous token;
mean diagonal minus mean off-diagonal entry over the off-diagonal entries' std) and the largest K-composition
of the model (any earlier head into any later one).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch


def rows(run_dir: Path) -> tuple[str, list[str]]:
    snapshots = json.loads((run_dir / "head_scores.json").read_text(encoding="utf-8"))["snapshots"]
    induction = torch.tensor(snapshots[-1]["scores"]["induction"])
    layer, head = divmod(int(induction.argmax()), induction.shape[1])
    lines = []
    for s in snapshots:
        circuits = s["circuits"]
        M = torch.tensor(circuits["maps"]["qk"][layer][head], dtype=torch.float64)  # thousandths: z is scale-free
        off = M[~torch.eye(M.shape[0], dtype=torch.bool)]
        z = float((M.diagonal().mean() - off.mean()) / off.std())
        K = torch.tensor(circuits["composition"]["k"]).max()
        positivity = circuits["positivity"]
        lines.append(
            f"{s['step']:>5} | {s['scores']['induction'][layer][head]:.2f} | {positivity['qk'][layer][head]:+.2f} "
            f"| {positivity['ov'][layer][head]:+.2f} | {z:+.1f} | {K:.2f}"
        )
    return f"L{layer}H{head}", lines


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("runs", nargs="+", type=Path)
    for run_dir in parser.parse_args().runs:
        head, lines = rows(run_dir)
        print(f"{run_dir}: induction head {head}")
        print(" step | induction | QK positivity | OV positivity | QK diagonal z | max K-composition")
        print("\n".join(lines))


if __name__ == "__main__":
    main()
