"""Draw docs/heads.md's pictures: `python docs/heads_pictures.py RUN_DIR [RUN_DIR ...] [--out docs/heads]`.

For each kind of head (src/model/head_scores.KINDS), the head with the highest score of that kind
over the runs' checkpoints (each run's checkpoints/best.ckpt), drawn as its attention on the
repeated probe the score is measured on (the first of the probe's strings): `<out>/<kind>.png`,
titled with the run, the head and its score. The docs' pictures came from the default
Shakespeare run and an `experiment=induction_heads` run.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from src.model.head_scores import KINDS, measure_heads, repeated_probe
from src.plots import attention_figure, save_png
from src.training.checkpoint import load_trained


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, default=Path("docs/heads"))
    args = parser.parse_args()
    best: dict[str, tuple[float, Path, int, int, object, list[str]]] = {}
    for run in args.runs:
        trained = load_trained(run / "checkpoints" / "best.ckpt")
        model, tokenizer = trained.model.eval(), trained.tokenizer
        probe = repeated_probe(tokenizer.vocab_size, model.context_window)
        result = measure_heads(model, probe)
        tokens = list(tokenizer.decode(probe[0].tolist()))
        for kind in KINDS:
            scores = result.scores[kind]
            layer, head = divmod(int(scores.argmax()), scores.shape[1])
            score = float(scores[layer, head])
            if kind not in best or score > best[kind][0]:
                best[kind] = (score, run, layer, head, result.probe_maps[layer][head : head + 1], tokens)
    args.out.mkdir(parents=True, exist_ok=True)
    for kind, (score, run, layer, head, weights, tokens) in best.items():
        title = f"{kind.replace('_', '-')} score {score:.2f}: layer {layer} head {head} of {run.name}"
        figure = attention_figure([weights], tokens, title, layer_numbers=[layer])
        figure.axes[0].set_title(f"layer {layer} head {head} on the repeated probe", fontsize=9)
        figure.set_size_inches(6, 6.6)
        save_png(figure, str(args.out / f"{kind}.png"))
        print(f"{args.out / kind}.png: {title}")


if __name__ == "__main__":
    main()
