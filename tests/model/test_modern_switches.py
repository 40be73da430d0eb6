"""Today's switches (RoPE, RMSNorm, ReLU²/SwiGLU, QK-norm, GQA, logit soft-capping, value embeddings,
smeared keys, a sliding window): each formula against an independent reference, plain == fused, the KV
cache, refusals."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from src.model import GPT, GPTConfig, SeedGPTConfig, build_model
from src.model.attention import MultiHeadAttention, Rotary, causal_mask, softmax
from src.model.generation import generate
from src.model.kv_cache import KVCache
from src.model.layers import MLP, RMSNorm, relu2, silu, softcap
from tests.model.tiny_models import ALL_SWITCHES, SEED_OPTIONS, VOCAB, seed_switches, tiny_model

# Every switch alone, then all at once; the seed model takes those that fit one attention layer.
SWITCHES = {
    "rope": {"positional": "rope"},
    "rms": {"norm": "rms"},
    "rms-no-gain": {"norm": "rms", "norm_gain": False},
    "relu2": {"activation": "relu2"},
    "swiglu": {"activation": "swiglu"},
    "qk-norm": {"qk_norm": True},
    "gqa": {"num_kv_heads": 2},
    "mqa": {"num_kv_heads": 1},
    "softcap": {"logit_softcap": 2.0},
    "value-embeddings": {"value_embeddings": True},
    "smeared-keys": {"smeared_keys": True},
    "window": {"attention_window": 3},
    "all": ALL_SWITCHES,
}
CASES = [("gpt", name) for name in SWITCHES] + [  # (kind, switch)
    ("seed", name) for name, switch in SWITCHES.items() if set(switch) <= SEED_OPTIONS
]


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny models on one thread: on a shared machine the sampler's thread probe alone took seconds."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def switched(kind: str, name: str, fused: bool = False, spread: float = 0.0) -> torch.nn.Module:
    """tiny_model with the switch on; spread > 0 redraws every parameter N(0, spread^2) so that
    gains, tables and value embeddings are not at their (uninformative) initial values."""
    switch = dict(SWITCHES[name])
    if kind == "seed":  # 8 x 12, 3 heads: d_head 4; GQA needs a k that divides 3
        switch = seed_switches(switch)
    model = tiny_model(kind, fused, **switch)
    if spread:
        g = torch.Generator().manual_seed(5)
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(torch.randn(p.shape, generator=g) * spread)
    return model


# ---------------------------------------------------------------------------- RoPE


def test_rope_equals_the_llama_rotary_of_transformers():
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

    B, h, T, d_head = 2, 4, 16, 8
    q, k = torch.randn(B, h, T, d_head), torch.randn(B, h, T, d_head)
    llama = LlamaRotaryEmbedding(LlamaConfig(hidden_size=h * d_head, num_attention_heads=h, max_position_embeddings=T))
    cos, sin = llama(q, torch.arange(T).unsqueeze(0))  # (1, T, d_head)
    q_ref, k_ref = apply_rotary_pos_emb(q, k, cos, sin)
    rotary = Rotary(d_head, T)
    torch.testing.assert_close(rotary(q), q_ref, atol=1e-6, rtol=0)
    torch.testing.assert_close(rotary(k), k_ref, atol=1e-6, rtol=0)
    # Positions 5..9 alone, as the KV cache feeds them, turn as they do inside the whole sequence.
    torch.testing.assert_close(rotary(q[:, :, 5:10], start=5), q_ref[:, :, 5:10], atol=1e-6, rtol=0)


def test_rope_is_multiplication_by_a_unit_complex_number():
    """Pair i as the complex number z_i = x_i + j x_{i+d/2}: position m multiplies it by e^{j m theta_i}."""
    d_head, T = 6, 9
    x = torch.randn(3, T, d_head, dtype=torch.float64)
    z = torch.complex(x[..., : d_head // 2], x[..., d_head // 2 :])  # (3, T, d/2)
    theta = 10000.0 ** (-torch.arange(0, d_head, 2, dtype=torch.float64) / d_head)
    m = torch.arange(T, dtype=torch.float64).unsqueeze(1)
    turned = z * torch.polar(torch.ones_like(m * theta), m * theta)
    expected = torch.cat([turned.real, turned.imag], dim=-1).float()
    torch.testing.assert_close(Rotary(d_head, T)(x.float()), expected, atol=1e-6, rtol=0)


def test_rope_scores_depend_only_on_the_distance():
    rotary = Rotary(8, 64)
    q, k = torch.randn(8), torch.randn(8)

    def score(m: int, n: int) -> float:
        return float(rotary(q.view(1, 1, 1, 8), m) @ rotary(k.view(1, 1, 1, 8), n).view(8))

    assert score(3, 1) == pytest.approx(score(40, 38), abs=1e-5)
    assert score(10, 0) == pytest.approx(score(60, 50), abs=1e-5)
    assert score(3, 1) != pytest.approx(score(3, 2), abs=1e-3)


def test_rope_adds_nothing_to_the_input_and_has_no_parameters():
    rope, plain = tiny_model("gpt", positional="rope"), tiny_model("gpt")
    assert sum(p.numel() for p in rope.parameters()) == sum(p.numel() for p in plain.parameters())
    idx = torch.randint(0, VOCAB, (1, 5))
    assert torch.equal(rope.embedding(idx), F.embedding(idx, rope.embedding.E))


# ---------------------------------------------------------------------------- norms and activations


@pytest.mark.parametrize("gain", [True, False])
def test_rms_norm_equals_torch(gain):
    x = torch.randn(4, 7, 10) * 3 + 1
    norm = RMSNorm(10, gain=gain)
    if gain:
        norm.gain.data = torch.randn(10)
    expected = F.rms_norm(x, (10,), norm.gain, eps=1e-5)
    torch.testing.assert_close(norm(x), expected)
    norm.fused = True
    torch.testing.assert_close(norm(x), expected)
    if not gain:  # no gain: every vector comes out with root-mean-square 1
        torch.testing.assert_close(norm(x).pow(2).mean(-1), torch.ones(4, 7), atol=1e-4, rtol=0)


def test_activations_equal_torch():
    x = torch.linspace(-6, 6, 1001)
    torch.testing.assert_close(relu2(x), F.relu(x) ** 2)
    torch.testing.assert_close(silu(x), F.silu(x))


def test_swiglu_holds_the_parameters_of_the_gelu_mlp_within_a_row():
    d = 120
    count = lambda act: sum(p.numel() for p in MLP(d, 4, activation=act).parameters())  # noqa: E731
    assert count("swiglu") == 3 * d * (2 * 4 * d // 3) == count("gelu")  # 320 hidden units, three matrices
    assert count("relu2") == count("gelu")


def test_swiglu_is_the_gate_times_the_value():
    mlp = MLP(6, 3, activation="swiglu")
    x = torch.randn(2, 5, 6)
    expected = (F.silu(x @ mlp.W_1) * (x @ mlp.W_3)) @ mlp.W_2
    torch.testing.assert_close(mlp(x), expected)


# ---------------------------------------------------------------------------- attention


def test_gqa_with_one_kv_head_per_query_head_is_todays_attention_exactly(kind):
    today = tiny_model(kind)
    heads = today.cfg.num_heads
    gqa = tiny_model(kind, num_kv_heads=heads)
    for (name, p), (name_2, q) in zip(today.state_dict().items(), gqa.state_dict().items(), strict=True):
        assert name == name_2 and torch.equal(p, q), name  # the same weights from the same seed
    idx = torch.randint(0, VOCAB, (2, today.context_window))
    assert torch.equal(today(idx, idx)[1], gqa(idx, idx)[1])
    assert all(torch.equal(a, b) for a, b in zip(today.attention_maps(idx), gqa.attention_maps(idx), strict=True))


@pytest.mark.parametrize("num_kv_heads", [1, 2])
def test_gqa_is_the_notes_split_and_concat_with_shared_keys_and_values(num_kv_heads):
    """Written out head by head: query head i reads key/value head i // (h / k)."""
    d, h = 16, 4
    attention = MultiHeadAttention(d, h, num_kv_heads=num_kv_heads)
    X = torch.randn(2, 7, d)
    d_head, group = d // h, h // num_kv_heads
    Q, K, V = X @ attention.W_Q, X @ attention.W_K, X @ attention.W_V  # (B, T, d), (B, T, k d_head) twice
    assert K.shape[-1] == V.shape[-1] == num_kv_heads * d_head
    mask = causal_mask(7)[0, 0]
    contexts = []
    for i in range(h):
        q = Q[..., i * d_head : (i + 1) * d_head]
        j = i // group  # the shared head this query head reads
        k, v = K[..., j * d_head : (j + 1) * d_head], V[..., j * d_head : (j + 1) * d_head]
        weights = softmax((q @ k.transpose(-2, -1) / math.sqrt(d_head)).masked_fill(mask, float("-inf")))
        contexts.append(weights @ v)
    expected = torch.cat(contexts, dim=-1) @ attention.W_O  # concatenate the heads, then W_O
    torch.testing.assert_close(attention(X)[0], expected, atol=1e-6, rtol=0)
    attention.fused = True  # the kernel's enable_gqa computes the same
    torch.testing.assert_close(attention(X)[0], expected, atol=1e-6, rtol=0)


def test_gqa_caches_only_the_shared_heads():
    model = tiny_model("gpt", num_kv_heads=1)
    cache = model.new_kv_cache(3)
    assert cache.keys.shape == (2, 3, 1, 12, 4)  # (layers, B, k, T, d_head): 4 times smaller than h = 4


def test_qk_norm_bounds_the_scores():
    """|q . k| / sqrt(d_k) <= sqrt(d_k) times the gains, whatever the size of X."""
    torch.manual_seed(0)
    attention, X = MultiHeadAttention(16, 4, qk_norm=True), torch.randn(1, 10, 16) * 1e4
    weights = attention(X, need_weights=True)[1]
    d_k = 4
    row = weights[0, :, -1]  # the last query sees all 10 keys
    ratio = row.max(-1).values / row.min(-1).values
    assert ratio.max() <= math.exp(2 * math.sqrt(d_k)) + 1e-3  # scores within [-sqrt(d_k), sqrt(d_k)]
    attention.q_norm = attention.k_norm = torch.nn.Identity()  # the same weights without QK-norm: the softmax saturates
    assert attention(X, need_weights=True)[1][0, :, -1].min() < 1e-6


def test_softcap_is_c_tanh_z_over_c():
    z = torch.linspace(-100, 100, 401)
    torch.testing.assert_close(softcap(z, 30.0), 30.0 * torch.tanh(z / 30.0))
    assert softcap(z, 30.0).abs().max() < 30.0
    assert softcap(z, None) is z
    model = tiny_model("gpt", logit_softcap=2.5)
    logits, _ = model(torch.randint(0, VOCAB, (2, 6)))
    assert logits.abs().max() < 2.5


def test_value_embeddings_add_a_token_table_to_v():
    model = tiny_model("gpt", value_embeddings=True)
    E_V = model.blocks[0].E_V
    assert E_V.shape == (VOCAB, 16)
    idx = torch.randint(0, VOCAB, (1, 6))
    before = model(idx)[0]
    with torch.no_grad():
        E_V[idx[0, 0]] += 1.0  # the first token's value embedding, in the first layer
    after = model(idx)[0]
    assert not torch.allclose(before, after)


@pytest.mark.parametrize("num_kv_heads", [4, 2])
def test_smeared_keys_mix_each_key_with_the_one_before_it(num_kv_heads):
    """k'_j = sigmoid(alpha_h) k_j + (1 - sigmoid(alpha_h)) k_{j-1}, k'_0 = k_0, written head by head
    and position by position; with GQA each shared key head has its own alpha."""
    torch.manual_seed(0)
    d, h, T = 16, 4, 7
    attention = MultiHeadAttention(d, h, num_kv_heads=num_kv_heads, smeared_keys=True)
    assert attention.smear.shape == (num_kv_heads,)
    with torch.no_grad():
        attention.smear.copy_(torch.randn(num_kv_heads) * 2)
    X = torch.randn(2, T, d)
    d_head, group = d // h, h // num_kv_heads
    Q, K, V = X @ attention.W_Q, X @ attention.W_K, X @ attention.W_V
    mask = causal_mask(T)[0, 0]
    contexts = []
    for i in range(h):
        j = i // group  # the shared key/value head
        s = float(torch.sigmoid(attention.smear.detach()[j]))  # sigmoid(alpha_j)
        k = K[..., j * d_head : (j + 1) * d_head]
        smeared = torch.stack([k[:, 0]] + [s * k[:, t] + (1 - s) * k[:, t - 1] for t in range(1, T)], dim=1)
        q, v = Q[..., i * d_head : (i + 1) * d_head], V[..., j * d_head : (j + 1) * d_head]
        weights = softmax((q @ smeared.transpose(-2, -1) / math.sqrt(d_head)).masked_fill(mask, float("-inf")))
        contexts.append(weights @ v)
    expected = torch.cat(contexts, dim=-1) @ attention.W_O
    torch.testing.assert_close(attention(X)[0], expected, atol=1e-6, rtol=0)
    attention.fused = True
    torch.testing.assert_close(attention(X)[0], expected, atol=1e-6, rtol=0)


def test_smeared_keys_with_sigmoid_alpha_one_are_todays_keys(kind):
    """alpha = 40: sigmoid(alpha) is 1.0 in float32, so each key is its own and the model is today's."""
    today, smeared = tiny_model(kind), tiny_model(kind, smeared_keys=True)
    state = smeared.state_dict()
    smear = [name for name in state if name.endswith("smear")]
    assert len(smear) == (1 if kind == "seed" else 2)  # one (h,) vector of alpha_h per layer
    today_state = {name: p for name, p in state.items() if name not in smear}
    today.load_state_dict(today_state)
    idx = torch.randint(0, VOCAB, (2, today.context_window))
    assert not torch.allclose(today(idx)[0], smeared(idx)[0])  # alpha = 0 at the start: half each
    with torch.no_grad():
        for name in smear:
            state[name].fill_(40.0)
    torch.testing.assert_close(today(idx)[0], smeared(idx)[0], atol=0, rtol=0)


@pytest.mark.parametrize("num_kv_heads", [4, 2])
def test_a_sliding_window_is_the_causal_mask_without_the_keys_older_than_w(num_kv_heads):
    """Written head by head: query i attends to keys i-w+1 .. i only; plain and fused paths alike."""
    torch.manual_seed(0)
    d, h, T, w = 16, 4, 9, 3
    attention = MultiHeadAttention(d, h, num_kv_heads, window=w)
    X = torch.randn(2, T, d)
    d_head, group = d // h, h // num_kv_heads
    Q, K, V = X @ attention.W_Q, X @ attention.W_K, X @ attention.W_V
    i, j = torch.arange(T).view(T, 1), torch.arange(T).view(1, T)
    mask = (j > i) | (j < i - w + 1)  # the future, and keys older than the window
    contexts = []
    for head in range(h):
        q = Q[..., head * d_head : (head + 1) * d_head]
        s = head // group
        k, v = K[..., s * d_head : (s + 1) * d_head], V[..., s * d_head : (s + 1) * d_head]
        weights = softmax((q @ k.transpose(-2, -1) / math.sqrt(d_head)).masked_fill(mask, float("-inf")))
        contexts.append(weights @ v)
    expected = torch.cat(contexts, dim=-1) @ attention.W_O
    out, weights = attention(X)
    torch.testing.assert_close(out, expected, atol=1e-6, rtol=0)
    assert torch.all(weights[..., mask] == 0) and torch.all(weights[..., ~mask] > 0)
    attention.fused = True
    torch.testing.assert_close(attention(X)[0], expected, atol=1e-6, rtol=0)


@pytest.mark.parametrize("fused", [False, True])
def test_a_key_outside_the_window_changes_nothing_for_the_query(fused):
    """Change the input at position p: queries p .. p+w-1 see it, queries from p+w on do not."""
    torch.manual_seed(0)
    T, w, p = 10, 4, 2
    attention = MultiHeadAttention(16, 4, window=w, fused=fused)
    X = torch.randn(1, T, 16)
    changed = X.clone()
    changed[:, p] += 1.0
    before, after = attention(X)[0], attention(changed)[0]
    assert not torch.allclose(before[:, p + w - 1], after[:, p + w - 1])  # the last query whose window holds p
    torch.testing.assert_close(before[:, p + w :], after[:, p + w :], atol=0, rtol=0)


def test_a_model_with_a_window_does_not_see_tokens_older_than_it(kind):
    """Each layer reaches w - 1 positions further back: the seed model's prediction at i reads tokens
    i-w+1 .. i only, the GPT's (2 layers) tokens i-2(w-1) .. i."""
    w, p = 3, 1
    model = tiny_model(kind, attention_window=w).eval()
    reach = model.num_layers * (w - 1)
    idx = torch.randint(0, VOCAB, (2, model.context_window), generator=torch.Generator().manual_seed(1))
    changed = idx.clone()
    changed[:, p] = (idx[:, p] + 1) % VOCAB
    before, after = model(idx)[0], model(changed)[0]
    assert not torch.allclose(before[:, p + reach], after[:, p + reach])
    torch.testing.assert_close(before[:, p + reach + 1 :], after[:, p + reach + 1 :], atol=0, rtol=0)


def test_a_window_as_long_as_the_context_is_no_window(kind):
    today = tiny_model(kind)
    T = today.context_window
    idx = torch.randint(0, VOCAB, (2, T))
    for w in (T, T + 5):
        windowed = tiny_model(kind, attention_window=w)
        assert torch.equal(today(idx)[0], windowed(idx)[0])  # the plain path: the same mask, bit for bit
    fused_today, fused_windowed = tiny_model(kind, fused=True), tiny_model(kind, fused=True, attention_window=T)
    torch.testing.assert_close(fused_today(idx)[0], fused_windowed(idx)[0], atol=1e-6, rtol=0)


def test_the_kv_cache_with_a_window_attends_to_the_last_w_keys_only():
    """Past the window, a cached step's query weighs the w newest keys and gives 0 to the older ones
    it still holds; its output equals that of the whole sequence run at once."""
    torch.manual_seed(0)
    T, w = 10, 3
    attention = MultiHeadAttention(16, 4, window=w)
    X = torch.randn(1, T, 16)
    cache = KVCache(1, 1, 4, T, 4)
    outputs = []
    for t in range(T):  # one position at a time, as generation feeds them
        out, weights = attention(X[:, t : t + 1], cache, need_weights=True)
        cache.advance(1)
        assert weights.shape == (1, 4, 1, t + 1)
        assert torch.all(weights[..., : max(0, t - w + 1)] == 0) and torch.all(weights[..., max(0, t - w + 1) :] > 0)
        outputs.append(out)
    torch.testing.assert_close(torch.cat(outputs, dim=1), attention(X)[0], atol=1e-6, rtol=0)


# ---------------------------------------------------------------------------- whole models


@pytest.mark.parametrize("kind,name", CASES)
def test_plain_and_fused_paths_agree_for_every_switch(kind, name):
    plain, fused = switched(kind, name, spread=0.3), switched(kind, name, True)
    fused.load_state_dict(plain.state_dict())
    idx = torch.randint(0, VOCAB, (3, plain.context_window), generator=torch.Generator().manual_seed(3))
    targets = torch.roll(idx, -1, dims=1)
    (logits_p, loss_p), (logits_f, loss_f) = plain(idx, targets), fused(idx, targets)
    torch.testing.assert_close(logits_p, logits_f, atol=1e-5, rtol=0)
    loss_p.backward()
    loss_f.backward()
    fused_params = dict(fused.named_parameters())
    for parameter_name, p in plain.named_parameters():
        torch.testing.assert_close(p.grad, fused_params[parameter_name].grad, atol=1e-5, rtol=0)


@pytest.mark.parametrize("kind,name", CASES)
def test_kv_cache_generation_equals_the_uncached_loop_for_every_switch(kind, name):
    """Greedy and sampled, past the window (RoPE's positions restart in the cropped window, as
    the uncached definition's do), from a one-token prompt and from a longer one."""
    model = switched(kind, name, spread=0.5)
    n = 2 * model.context_window
    for prompt in (torch.randint(0, VOCAB, (2, 1)), torch.randint(0, VOCAB, (2, 5))):
        cached = generate(model, prompt, n, greedy=True)
        assert torch.equal(cached, generate(model, prompt, n, greedy=True, use_cache=False))
    sampled = [
        generate(model, prompt, n, use_cache=c, generator=torch.Generator().manual_seed(7)) for c in (True, False)
    ]
    assert torch.equal(*sampled)


@pytest.mark.parametrize("kind,name", CASES)
def test_causal_with_every_switch(kind, name):
    model = switched(kind, name, spread=0.3).eval()
    T = model.context_window
    idx = torch.randint(0, VOCAB, (2, T))
    changed = idx.clone()
    changed[:, 5:] = (idx[:, 5:] + 1) % VOCAB
    torch.testing.assert_close(model(idx)[0][:, :5], model(changed)[0][:, :5], atol=1e-6, rtol=0)


def test_a_model_with_every_switch_learns_a_short_text():
    from src.data.tokenizer import CharTokenizer

    text = "to be or not to be, that is the question. " * 4
    tok = CharTokenizer.from_text(text)
    data = tok.encode(text)
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=tok.vocab_size, context_window=16, embedding_dim=32, num_heads=4, num_layers=2)
    model = GPT(GPTConfig(**{**cfg.__dict__, **SWITCHES["all"]}))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    x = torch.stack([data[s : s + 16] for s in range(0, len(data) - 17, 3)])
    y = torch.stack([data[s + 1 : s + 17] for s in range(0, len(data) - 17, 3)])
    losses = []
    for _ in range(40):
        _, loss = model(x, y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[0] > 2.5 and losses[-1] < 0.5 * losses[0]


@pytest.mark.parametrize(
    "kind,cfg,message",
    [
        ("gpt", dict(num_kv_heads=3), r"model.num_kv_heads must divide num_heads \(4\), got 3: choose one of 1, 2, 4"),
        ("gpt", dict(num_kv_heads=0), r"model.num_kv_heads must divide num_heads"),
        ("gpt", dict(num_kv_heads=2, bias=True), r"model.bias=true .*set model.bias=false or model.num_kv_heads=null"),
        ("gpt", dict(embedding_dim=12, num_heads=4, positional="rope"), r"rope rotates pairs.*each head has 3"),
        ("gpt", dict(logit_softcap=0.0), r"model.logit_softcap must be a positive number, or null"),
        ("gpt", dict(logit_softcap=1e-30), r"at least ln\(V - 1\) / 2 = .* \(below it no character can get half"),
        ("gpt", dict(norm="batch"), r"model.norm must be one of layer, rms"),
        ("gpt", dict(activation="tanh"), r"model.activation must be one of gelu, relu2, swiglu"),
        ("gpt", dict(positional="alibi"), r"model.positional must be one of sinusoidal, learned, rope"),
        ("seed", dict(num_kv_heads=2), r"model.num_kv_heads must divide num_heads \(5\)"),
        ("seed", dict(activation="relu2"), r"model.activation is an option of the gpt model, not of the seed model"),
        ("seed", dict(value_embeddings=True), r"model.value_embeddings is an option of the gpt model, not of the seed"),
        ("gpt", dict(attention_window=0), r"^model.attention_window must be a positive integer, got 0: .*null lets"),
        ("seed", dict(attention_window=-2), r"^model.attention_window must be a positive integer, got -2"),
    ],
)
def test_combinations_that_cannot_work_are_refused_naming_the_fix(kind, cfg, message):
    with pytest.raises(ValueError, match=message):
        build_model({"kind": kind, **cfg}, VOCAB)


def test_todays_defaults_are_unchanged():
    assert (GPTConfig(vocab_size=2).positional, GPTConfig(vocab_size=2).norm) == ("sinusoidal", "layer")
    cfg = GPTConfig(vocab_size=2)
    assert (cfg.activation, cfg.qk_norm, cfg.num_kv_heads, cfg.logit_softcap, cfg.value_embeddings) == (
        "gelu",
        False,
        None,
        None,
        False,
    )
    assert cfg.smeared_keys is False and cfg.attention_window is None
    seed = SeedGPTConfig(vocab_size=2)
    assert (seed.norm, seed.qk_norm, seed.num_kv_heads, seed.logit_softcap) == ("layer", False, None, None)
    assert seed.smeared_keys is False and seed.attention_window is None


def test_the_attention_itself_refuses_a_window_below_one():
    with pytest.raises(ValueError, match=r"^model.attention_window must be a positive integer, got 0: [^\n]*$"):
        MultiHeadAttention(16, 4, window=0)
