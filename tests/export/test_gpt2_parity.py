"""Exported, then loaded by the field's own tools: transformers' GPT2LMHeadModel and TransformerLens's
TransformerBridge give our logits (to 1e-5) and our plain path's attention weights, for every way our
GPT can be built that GPT-2 holds: sinusoidal or learned positions, 1, 4 or 5 heads, tied or untied
head, with or without biases. No network: the socket is guarded for the whole module."""

from __future__ import annotations

import itertools
import socket
from pathlib import Path

import pytest
import torch

from src.data.tokenizer import CharTokenizer
from src.export.hf import NotExportable, check_gpt2, write_hf
from src.export.lens import transformer_bridge
from src.model import GPT, GPTConfig
from src.training.checkpoint import Trained
from tests.helpers import block_network

VOCAB = sorted(set("First Citizen:\nBefore we proceed 日本語の文字 🙂🎭 done."))
CONFIGS = list(itertools.product(("sinusoidal", "learned"), (1, 4, 5), (True, False)))


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for name in ("connect", "connect_ex"):
        monkeypatch.setattr(socket.socket, name, getattr(socket.socket, name))  # undone after the test
    monkeypatch.setattr(socket, "getaddrinfo", socket.getaddrinfo)
    block_network()


def test_the_network_guard_refuses_a_remote_connection():
    """The guard that the tests here run under can fail: a connection to a remote address is refused."""
    with pytest.raises(OSError, match="network access attempted"):
        socket.create_connection(("192.0.2.1", 443), timeout=1)  # TEST-NET-1: never reachable anyway
    with pytest.raises(OSError, match="network access attempted"):
        socket.getaddrinfo("huggingface.co", 443)


def trained_gpt(positional: str, heads: int, tied: bool, bias: bool = False, **options: object) -> Trained:
    """A GPT whose weights are all far from their initial values (biases and gains included), in eval mode."""
    torch.manual_seed(heads * 10 + tied)
    cfg = GPTConfig(
        vocab_size=len(VOCAB),
        context_window=24,
        embedding_dim=40,
        num_heads=heads,
        num_layers=2,
        positional=positional,
        tie_weights=tied,
        bias=bias,
        **{"fused": False, **options},  # the plain path, as the references compute it
    )
    model = GPT(cfg).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.2)
    hparams = {"model": {"kind": "gpt", **{k: v for k, v in vars(cfg).items() if k != "vocab_size"}}}
    return Trained(model, CharTokenizer(VOCAB), hparams, global_step=0)


def ids(batch: int = 3, T: int = 24) -> torch.Tensor:
    return torch.randint(0, len(VOCAB), (batch, T), generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize(("positional", "heads", "tied"), CONFIGS)
def test_gpt2_logits_equal_ours(tmp_path: Path, positional: str, heads: int, tied: bool):
    from transformers import GPT2LMHeadModel

    trained = trained_gpt(positional, heads, tied, bias=heads == 5)
    write_hf(trained.model, VOCAB, tmp_path)
    hf = GPT2LMHeadModel.from_pretrained(tmp_path).eval()
    x = ids()
    with torch.no_grad():
        ours, _ = trained.model(x)
        theirs = hf(x).logits
    assert ours.abs().max() > 1.0  # logits of a model with real weights, not near zero
    assert torch.allclose(theirs, ours, atol=1e-5, rtol=0), (theirs - ours).abs().max()
    # The head is tied in GPT-2 exactly when ours is one matrix used as it is (learned positions).
    assert hf.config.tie_word_embeddings == (tied and positional == "learned")


@pytest.mark.parametrize(("positional", "heads", "tied"), CONFIGS)
def test_transformerlens_logits_and_patterns_equal_ours(positional: str, heads: int, tied: bool):
    trained = trained_gpt(positional, heads, tied, bias=heads == 4)
    bridge = transformer_bridge(trained)
    x = ids(batch=2)
    with torch.no_grad():
        logits, cache = bridge.run_with_cache(x)
        ours, _ = trained.model(x)
        weights = trained.model.attention_maps(x)  # the plain path: per layer (B, h, T, T)
    assert torch.allclose(logits, ours, atol=1e-5, rtol=0), (logits - ours).abs().max()
    for layer, ours_w in enumerate(weights):
        pattern = cache["pattern", layer]  # (B, h, T, T)
        assert pattern.shape == ours_w.shape == (2, heads, 24, 24)
        assert torch.allclose(pattern, ours_w, atol=1e-6, rtol=0), (pattern - ours_w).abs().max()


def test_the_character_tokenizer_round_trips_every_character(tmp_path: Path):
    from transformers import PreTrainedTokenizerFast

    trained = trained_gpt("sinusoidal", 4, True)
    write_hf(trained.model, VOCAB, tmp_path)
    tokenizer = PreTrainedTokenizerFast.from_pretrained(tmp_path)
    every = "".join(VOCAB)  # CJK, emoji, the newline and the space among them
    assert tokenizer(every)["input_ids"] == list(range(len(VOCAB)))
    assert tokenizer.decode(list(range(len(VOCAB)))) == every
    text = "First 日本 🙂\n  done."
    assert tokenizer.decode(tokenizer(text)["input_ids"]) == text
    assert tokenizer(text)["input_ids"] == CharTokenizer(VOCAB).encode(text).tolist()


@pytest.mark.parametrize("options", [{"mlp_ratio": 0}, {"norm_gain": False, "bias": True}, {"num_kv_heads": 4}])
def test_gpt2_holds_an_attention_only_model_and_norms_without_gain(tmp_path: Path, options: dict):
    """mlp_ratio=0 becomes an MLP of one zero unit, norm_gain=false gains of 1: the logits stay ours."""
    from transformers import GPT2LMHeadModel

    trained = trained_gpt("sinusoidal", 4, True, **options)
    write_hf(trained.model, VOCAB, tmp_path)
    hf = GPT2LMHeadModel.from_pretrained(tmp_path).eval()
    with torch.no_grad():
        assert torch.allclose(hf(ids()).logits, trained.model(ids())[0], atol=1e-5, rtol=0)


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("positional", "rope"),
        ("norm", "rms"),
        ("activation", "swiglu"),
        ("qk_norm", True),
        ("logit_softcap", 30.0),
        ("value_embeddings", True),
        ("smeared_keys", True),
        ("num_kv_heads", 2),
    ],
)
def test_options_gpt2_cannot_hold_are_refused_naming_them(option: str, value: object):
    GPTConfig(vocab_size=5, embedding_dim=40, num_heads=4, **{option: value})  # a model we can train
    with pytest.raises(NotExportable, match=f"model.{option}={value} cannot be exported as format=hf"):
        check_gpt2({"kind": "gpt", "num_heads": 4, option: value})


def test_the_seed_model_is_refused_naming_it():
    with pytest.raises(NotExportable, match="model=seed cannot be exported as format=hf"):
        check_gpt2({"kind": "seed", "num_heads": 5})


def test_the_bridge_tokenizes_without_a_bos_and_maps_back(tmp_path: Path):
    """to_tokens gives our ids (no BOS prepended), to_string our text, for a vocabulary without "a"."""
    from src.export.lens import boot

    trained = trained_gpt("learned", 4, True)
    assert "a" not in VOCAB
    write_hf(trained.model, VOCAB, tmp_path)
    bridge = boot(tmp_path)
    text = "First 日本 🙂"
    tokens = bridge.to_tokens(text)
    assert tokens.tolist() == [CharTokenizer(VOCAB).encode(text).tolist()]
    assert bridge.to_string(tokens[0]) == text
    with torch.no_grad():
        assert torch.allclose(bridge(tokens), trained.model(tokens)[0], atol=1e-5, rtol=0)
