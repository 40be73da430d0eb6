"""Head scores tracked during training: TensorBoard, head_scores.json, result.json, and switched off."""

import json
import re

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from src.data.datamodule import split_lengths
from src.model.ablation import ablation_table
from src.model.circuits import bigram_log_probs, circuits
from src.model.head_scores import MEASURES, measure_heads, repeated_probe
from src.run.cli import compose
from src.train import train
from src.training.checkpoint import load_trained
from tests.helpers import run_main, scalars, shakespeare_file, tiny_training, train_in_process

SEED = ["model=seed", "model.context_window=10", "model.embedding_dim=12", "model.num_heads=3"]


def train_seed_model(run):
    """tiny_training's run with the notes' model (which has no num_layers)."""
    args = [a for a in tiny_training(run.parent) if not a.startswith(("model.num_layers", "model.context_window"))]
    train(compose("train", [*args, *SEED, f"paths.output_dir={run}"]))


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["gpt", "seed"])
def test_every_validation_scores_every_head_and_the_last_snapshot_equals_the_checkpoint(tmp_path, kind):
    run = tmp_path / "run"
    train_seed_model(run) if kind == "seed" else train_in_process(run)
    layers, heads = (1, 3) if kind == "seed" else (2, 2)

    saved = json.loads((run / "head_scores.json").read_text())
    assert saved["format"] == "scratchgpt head scores 1" and (saved["layers"], saved["heads"]) == (layers, heads)
    assert [s["step"] for s in saved["snapshots"]] == [0, 20, 40]  # step 0 included
    n = saved["probe"]["n"]
    assert saved["probe"]["tokens"][:n] == saved["probe"]["tokens"][n:] and len(saved["probe"]["text"]) == 2 * n
    window = 10 if kind == "seed" else 16
    assert saved["prompt"]["text"] == "First Citizen:"[-window:]  # the page's opening prompt, cropped to the window
    last = saved["snapshots"][-1]
    T = len(saved["prompt"]["tokens"])
    assert len(last["maps"]["prompt"]) == layers and len(last["maps"]["prompt"][0]) == heads
    assert [len(row) for row in last["maps"]["prompt"][0][0]] == list(range(1, T + 1))  # row i: keys 0..i
    assert all(abs(sum(row) - 1000) <= T for row in last["maps"]["probe"][-1][-1])  # thousandths, rows sum to 1

    # The snapshot at step 40 is what the checkpoint saved at step 40 scores.
    trained = load_trained(run / "checkpoints" / "last.ckpt")
    assert trained.global_step == 40
    probe = repeated_probe(trained.tokenizer.vocab_size, trained.model.context_window, 16, seed=0)
    again = measure_heads(trained.model, probe)
    for measure in MEASURES:
        assert torch.allclose(again.scores[measure], torch.tensor(last["scores"][measure]), atol=1e-5), measure
    assert again.in_context == pytest.approx(last["in_context"], abs=1e-5)
    # ... and so are its circuits, recomputed from that checkpoint.
    assert [set(s["circuits"]) for s in saved["snapshots"]] == [
        {"positivity", "composition", "direct_correlation", "maps"}
    ] * 3
    stored, recomputed = last["circuits"], circuits(trained.model)
    V = trained.tokenizer.vocab_size
    for key in ("qk", "ov"):
        assert torch.allclose(torch.tensor(stored["positivity"][key]), recomputed["positivity"][key], atol=1e-5)
        scale = torch.tensor(stored["maps"]["scale"][key])  # (L, h): each map's largest |value|
        assert torch.allclose(scale, recomputed[key].abs().amax(dim=(-2, -1)), rtol=1e-5)
        thousandths = torch.tensor(stored["maps"][key])  # (L, h, V, V) integers
        assert thousandths.shape == (layers, heads, V, V) and thousandths.abs().max() == 1000
        assert (thousandths - recomputed[key] / scale[..., None, None] * 1000).abs().max() <= 0.5 + 1e-3
    for key in "qkv":
        assert torch.allclose(torch.tensor(stored["composition"][key]), recomputed["composition"][key], atol=1e-6)
    if kind == "gpt":
        direct = recomputed["direct"]
        assert stored["maps"]["scale"]["direct"] == pytest.approx(float(direct.abs().max()), rel=1e-5)
        assert torch.tensor(stored["maps"]["direct"]).shape == (V, V)
        text = shakespeare_file().read_text(encoding="utf-8")
        ids = trained.tokenizer.encode(text[: split_lengths(len(text), 0.02, 0.0)["train"]])  # tiny_training's
        correlation = circuits(trained.model, bigram_log_probs(ids, V))["direct_correlation"]
        assert stored["direct_correlation"] == pytest.approx(correlation, abs=1e-5)
    else:
        assert stored["maps"]["direct"] is None and stored["direct_correlation"] is None

    result = json.loads((run / "result.json").read_text())["heads"]
    assert result["scores"]["induction"] == last["scores"]["induction"]
    assert result["in_context"] == last["in_context"] and result["in_context_text"] is not None
    assert set(result) >= {"previous_token_heads", "induction_heads", "best_induction"}
    assert result["positivity"] == stored["positivity"]
    ov = torch.tensor(stored["positivity"]["ov"])
    assert result["most_copying_positivity"] == pytest.approx(float(ov.max()))
    assert result["direct_correlation"] == stored["direct_correlation"]
    # result.json's ablation: the final model's val loss on the text windows, and its rise without each head.
    ablation = json.loads((run / "result.json").read_text())["ablation"]
    T, text = trained.model.context_window, shakespeare_file().read_text(encoding="utf-8")
    n_train = split_lengths(len(text), 0.02, 0.0)["train"]
    windows = trained.tokenizer.encode(text[n_train : n_train + 16 * T]).view(16, T)  # TrackHeads' text windows
    assert ablation == {**ablation_table(trained.model.eval(), windows), "loss": pytest.approx(ablation["loss"])}
    assert len(ablation["rise"]) == layers and len(ablation["rise"][0]) == heads

    logged = scalars(run)
    assert [step for step, _ in logged["score_in_context/repeats"]] == [0, 20, 40]
    assert not any(tag.startswith("loss/in_context") for tag in logged)  # the loss group: train, val, best
    # The circuits' charts: tags of the run's own TensorBoard run, not runs of their own.
    copying = logged[f"weight_circuits/ov_positivity_L{layers - 1}H{heads - 1}"]
    assert [step for step, _ in copying] == [0, 20, 40] and copying[-1][1] == pytest.approx(ov[-1, -1].item())
    if kind == "gpt":
        K = torch.tensor(stored["composition"]["k"])
        assert logged["weight_circuits/k_composition_max"][-1][1] == pytest.approx(K.max().item())
        assert (
            result["max_k_composition"] == pytest.approx(K.max().item()) and "->L1H" in result["max_k_composition_pair"]
        )
        assert logged["weight_circuits/direct_bigram_correlation"][-1][1] == pytest.approx(stored["direct_correlation"])
    else:  # one layer: nothing to compose
        assert "weight_circuits/k_composition_max" not in logged and result["max_k_composition"] is None
    # A run per head (TensorBoard's colour per run), the layer in the tag (src/training/tensorboard.py)
    runs = sorted(p.name for p in (run / "tensorboard").iterdir() if p.is_dir())
    assert runs == ["best", *(f"head_{h}" for h in range(heads)), "val"]  # beside the val and best val loss's runs
    head_1 = scalars(run / "tensorboard" / "head_1", "")
    assert set(head_1) == {f"score_{measure}/layer_{layer}" for measure in MEASURES for layer in range(layers)}
    assert [step for step, _ in head_1["score_induction/layer_0"]] == [0, 20, 40]
    assert head_1["score_induction/layer_0"][-1][1] == pytest.approx(last["scores"]["induction"][0][1])
    head_0 = scalars(run / "tensorboard" / "head_0", "")
    assert head_0[f"score_previous_token/layer_{layers - 1}"][-1][1] == pytest.approx(
        last["scores"]["previous_token"][layers - 1][0]
    )
    events = EventAccumulator(str(run / "tensorboard"), size_guidance={"images": 0, "tensors": 0})
    events.Reload()
    assert [e.step for e in events.Images("maps/heads_at_a_glance")] == [0, 20, 40]
    assert "custom_scalars__config__" in events.Tags()["tensors"]


@pytest.mark.slow
def test_a_run_with_the_scores_switched_off_trains_and_writes_none(tmp_path):
    run = tmp_path / "run"
    train_in_process(run, "callbacks.head_scores=null")
    assert not (run / "head_scores.json").exists()
    assert json.loads((run / "result.json").read_text())["heads"] is None
    assert not any(tag.startswith("score_") for tag in scalars(run))
    assert sorted(p.name for p in (run / "tensorboard").iterdir() if p.is_dir()) == ["best", "val"]  # no head runs


@pytest.mark.parametrize(
    ("override", "pattern"),
    [
        ("callbacks.head_scores.probe_batch=0", r"callbacks.head_scores.probe_batch must be a positive integer"),
        ("callbacks.head_scores.text_windows=-1", r"callbacks.head_scores.text_windows must be a positive integer"),
        ("callbacks.head_scores.seed=-3", r"callbacks.head_scores.seed must be a non-negative integer"),
        ("model.context_window=3", r"callbacks.head_scores needs model.context_window >= 4.*head_scores=null"),
    ],
)
def test_bad_head_score_settings_are_one_line_and_write_nothing(tmp_path, override, pattern):
    result = run_main("train", *tiny_training(tmp_path / "outputs", override))
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), result.stderr[-2000:]
    assert re.search(pattern, lines[0]), lines[0]
    assert not (tmp_path / "outputs").exists() or not any((tmp_path / "outputs").rglob("*.json"))


@pytest.mark.slow
def test_a_resumed_run_keeps_the_snapshots_before_its_step_and_carries_on(tmp_path):
    run = tmp_path / "run"
    train_in_process(run, "trainer.max_steps=20")
    before = json.loads((run / "head_scores.json").read_text())["snapshots"]
    assert [s["step"] for s in before] == [0, 20]
    train_in_process(run, "trainer.max_steps=40", f"ckpt_path={run / 'checkpoints' / 'last.ckpt'}")
    after = json.loads((run / "head_scores.json").read_text())["snapshots"]
    assert [s["step"] for s in after] == [0, 20, 40]  # no second step 0: a resumed run does not validate there
    assert after[:2] == before


def test_the_run_says_when_each_head_first_became_a_kind(tmp_path):
    """Issue 47 item 4: neither the terminal nor result.json said at which step a head first became a kind."""
    from src.training.heads import TrackHeads

    track = TrackHeads(prompt="To be", path=tmp_path / "head_scores.json")
    kinds = [
        [[None, None], [None, None]],
        [[None, "previous_token"], [None, None]],
        [[None, "previous_token"], ["induction", None]],
        [[None, None], ["induction", "induction"]],  # a head may stop being its kind: its first step stays
    ]
    track.snapshots = [{"step": 100 * i, "kinds": k} for i, k in enumerate(kinds)]
    assert track.became() == [
        {"layer": 0, "head": 1, "kind": "previous_token", "step": 100},
        {"layer": 1, "head": 0, "kind": "induction", "step": 200},
        {"layer": 1, "head": 1, "kind": "induction", "step": 300},
    ]
    assert track.became_line() == (
        "heads that became a kind: layer 0 head 1 previous-token at step 100; layer 1 head 0 induction at step 200; "
        "layer 1 head 1 induction at step 300"
    )
    track.snapshots = track.snapshots[:1]
    assert track.became() == [] and track.became_line() is None


def test_the_run_ends_saying_how_much_each_head_is_worth():
    from src.training.heads import TrackHeads

    track = TrackHeads(prompt="To be", path="head_scores.json")
    assert track.ablation_line() is None  # no windows, no table
    track.ablation = {"loss": 1.5, "rise": [[0.01, 0.5], [-0.002, 0.2]], "mode": "zero", "windows": 16}
    assert track.ablation_line(shown=3) == (
        "val loss 1.5000 on 16 windows rises without each head (zero ablation): L0H1 +0.500, L1H1 +0.200, "
        "L0H0 +0.010, and 1 more (result.json's ablation)"
    )
