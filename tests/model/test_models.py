"""SeedGPT and GPT: causality, the prefix loop of the notes, plain == fused, learning."""

import pytest
import torch

from src.model import GPT, GPTConfig, SeedGPTConfig, count_parameters
from tests.model.tiny_models import VOCAB, tiny_model


@pytest.mark.parametrize("fused", [False, True])
def test_future_tokens_never_change_earlier_logits(kind, fused):
    model = tiny_model(kind, fused).eval()
    T = model.context_window
    g = torch.Generator().manual_seed(1)
    idx = torch.randint(0, VOCAB, (2, T), generator=g)
    logits, _ = model(idx)
    for t in [0, 1, T // 2, T - 2]:
        changed = idx.clone()
        changed[:, t + 1 :] = torch.randint(0, VOCAB, (2, T - t - 1), generator=g)
        assert not torch.equal(changed, idx)
        new_logits, _ = model(changed)
        assert torch.allclose(new_logits[:, : t + 1], logits[:, : t + 1], atol=1e-6)
        assert not torch.allclose(new_logits[:, t + 1 :], logits[:, t + 1 :])


def test_batched_forward_equals_the_prefix_loop(kind):
    model = tiny_model(kind).eval()
    idx = torch.randint(0, VOCAB, (3, model.context_window), generator=torch.Generator().manual_seed(2))
    logits, _ = model(idx)
    for i in range(idx.shape[1]):
        prefix_logits, _ = model(idx[:, : i + 1])
        assert torch.allclose(logits[:, i], prefix_logits[:, -1], atol=1e-5)


@pytest.mark.parametrize(
    "overrides",
    [{}, {"positional": "learned"}, {"bias": True, "tie_weights": False}],
    ids=["default", "learned-pe", "bias-untied"],
)
def test_plain_and_fused_paths_agree_in_outputs_and_gradients(overrides):
    kind = "gpt"
    _check_plain_equals_fused(tiny_model(kind, False, **overrides), tiny_model(kind, True, **overrides))


def test_plain_and_fused_seed_models_agree():
    _check_plain_equals_fused(tiny_model("seed", False), tiny_model("seed", True))


def _check_plain_equals_fused(plain, fused):
    fused.load_state_dict(plain.state_dict())
    idx = torch.randint(0, VOCAB, (4, plain.context_window), generator=torch.Generator().manual_seed(3))
    targets = torch.roll(idx, -1, dims=1)
    logits_p, loss_p = plain(idx, targets)
    logits_f, loss_f = fused(idx, targets)
    assert torch.allclose(logits_p, logits_f, atol=1e-5)
    assert torch.allclose(loss_p, loss_f, atol=1e-5)
    loss_p.backward()
    loss_f.backward()
    grads_f = dict(fused.named_parameters())
    for name, p in plain.named_parameters():
        assert p.grad is not None, name
        assert torch.allclose(p.grad, grads_f[name].grad, atol=1e-5), name


def test_both_models_return_logits_for_every_position(kind):
    model = tiny_model(kind)
    idx = torch.randint(0, VOCAB, (2, 5))
    logits, loss = model(idx)
    assert logits.shape == (2, 5, VOCAB) and loss is None
    _, loss = model(idx, idx)
    assert loss.shape == () and loss.requires_grad


def test_sequences_longer_than_the_window_are_refused(kind):
    model = tiny_model(kind)
    with pytest.raises(ValueError, match="longer than context_window"):
        model(torch.zeros(1, model.context_window + 1, dtype=torch.long))


def test_attention_maps_come_from_the_plain_path_even_when_fused(kind):
    model = tiny_model(kind, fused=True)
    maps = model.attention_maps(torch.randint(0, VOCAB, (1, 6)))
    assert len(maps) == model.num_layers
    for weights in maps:
        assert weights.shape == (1, model.cfg.num_heads, 6, 6)
        assert torch.allclose(weights.sum(-1), torch.ones(1, model.cfg.num_heads, 6), atol=1e-6)
        assert torch.all(weights.triu(1) == 0)


def test_parameter_count_matches_the_formula():
    d, V, T, L = 16, VOCAB, 12, 2
    gpt = GPT(GPTConfig(vocab_size=V, context_window=T, embedding_dim=d, num_heads=4, num_layers=L))
    per_block = 4 * d * d + 2 * 4 * d * d + 2 * d  # W_Q,K,V,O + MLP + two LN gains
    assert count_parameters(gpt) == V * d + L * per_block + d  # tied head, sinusoidal PE: no parameters
    seed = tiny_model("seed")
    d, V = 12, VOCAB
    assert count_parameters(seed) == V * d + 2 * d + 4 * d * d + d * V + V


@pytest.mark.parametrize(
    "cfg,message",
    [
        (dict(embedding_dim=64, num_heads=6), r"embedding_dim \(64\) must be divisible by num_heads \(6\)"),
        (dict(context_window=0), "context_window must be a positive integer"),
        (dict(num_layers=-1), "num_layers must be a positive integer"),
        (dict(num_heads=0), "num_heads must be a positive integer"),
        (dict(dropout=1.5), r"dropout must be in \[0, 1\)"),
    ],
)
def test_bad_configs_say_what_to_fix(cfg, message):
    with pytest.raises(ValueError, match=message):
        GPTConfig(vocab_size=VOCAB, **cfg)


def test_seed_preset_is_the_notes_model():
    cfg = SeedGPTConfig(vocab_size=65)
    assert (cfg.context_window, cfg.embedding_dim, cfg.num_heads) == (10, 60, 5)
    with pytest.raises(ValueError, match="divisible"):
        SeedGPTConfig(vocab_size=65, num_heads=7)


@pytest.mark.slow  # tens of seconds of training
def test_tiny_gpt_overfits_a_short_text_with_a_plain_loop():
    from src.data.tokenizer import CharTokenizer

    text = "to be or not to be, that is the question. " * 4
    tok = CharTokenizer.from_text(text)
    data = tok.encode(text)
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=tok.vocab_size, context_window=16, embedding_dim=32, num_heads=4, num_layers=2))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    starts = torch.arange(0, len(data) - 17)
    x = torch.stack([data[s : s + 16] for s in starts])
    y = torch.stack([data[s + 1 : s + 17] for s in starts])
    losses = []
    for _ in range(150):
        _, loss = model(x, y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[0] > 2.5
    assert losses[-1] < 0.2 * losses[0]


@pytest.mark.slow
def test_compile_builds_one_training_graph_and_leaves_eval_and_sampling_eager():
    """compile=true: training steps run the compiled graph (same numbers as eager); validation,
    sampling and attention maps never recompile it or fall back mid-run."""
    from torch._dynamo.utils import counters

    from src.model.generation import generate

    torch._dynamo.reset()
    counters.clear()
    eager, compiled = tiny_model("gpt", fused=True, dropout=0.0), tiny_model("gpt", fused=True, dropout=0.0)
    compiled.compile(backend="aot_eager")  # the same tracing as inductor, without code generation
    T = compiled.context_window
    x, y = torch.randint(0, VOCAB, (4, T)), torch.randint(0, VOCAB, (4, T))
    for _ in range(2):
        for model in (eager, compiled):
            _, loss = model(x, y)
            loss.backward()
        torch.testing.assert_close(compiled(x, y)[1], eager(x, y)[1])
    compiled.eval()
    with torch.no_grad():
        compiled(x[:3])  # a validation batch of another size
    generate(compiled, x[0, :2], 2 * T)  # with the cache, then past the window without it
    compiled.attention_maps(x[:1])
    assert counters["stats"]["unique_graphs"] == 1
    assert not counters["graph_break"]
    for p, q in zip(eager.parameters(), compiled.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad)
