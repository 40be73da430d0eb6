"""A checkpoint's model config is checked against the weights its file holds before any model is built.

Issue 37 item 13: a crafted checkpoint whose config said embedding_dim=65536, num_layers=64 made
generate allocate until the kernel killed it (24 GB RSS).
"""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from src.data.tokenizer import CharTokenizer
from src.model import build_model, count_parameters, parameters_of
from src.training import checkpoint as checkpoint_module
from src.training.checkpoint import CheckpointError, load_trained, read_checkpoint

TOKENIZER = CharTokenizer.from_text("abc def\n")
SMALL = {"kind": "gpt", "context_window": 8, "embedding_dim": 16, "num_heads": 2, "num_layers": 1}


def saved(tmp_path, model_cfg, weights_cfg=SMALL):
    """A checkpoint file whose weights are those of `weights_cfg`'s model and whose config says `model_cfg`."""
    model = build_model(weights_cfg, TOKENIZER.vocab_size)
    path = tmp_path / "crafted.ckpt"
    torch.save(
        {
            "hyper_parameters": {"model": model_cfg, "tokenizer": TOKENIZER.to_dict()},
            "state_dict": {f"model.{k}": v for k, v in model.state_dict().items()},
            "global_step": 1,
        },
        path,
    )
    return path


@pytest.mark.parametrize(
    "crafted",
    [
        {**SMALL, "embedding_dim": 65536, "num_layers": 64},
        {**SMALL, "embedding_dim": 2048, "num_layers": 2},
        {"kind": "seed", "context_window": 8, "embedding_dim": 4096, "num_heads": 2},
    ],
)
def test_a_config_larger_than_its_weights_is_refused_before_a_model_is_built(tmp_path, monkeypatch, crafted):
    path = saved(tmp_path, crafted)

    def no_model(*args, **kwargs):
        raise AssertionError("a model was built")

    monkeypatch.setattr(checkpoint_module, "build_model", no_model)
    for read in (read_checkpoint, load_trained):
        with pytest.raises(CheckpointError, match=r"makes a model of at least [\d,]+ parameters, but the file holds"):
            read(path)


def test_the_checkpoint_of_its_own_config_loads(tmp_path):
    trained = load_trained(saved(tmp_path, SMALL))
    assert count_parameters(trained.model) == count_parameters(build_model(SMALL, TOKENIZER.vocab_size))


@settings(max_examples=40, deadline=None)
@given(
    kind=st.sampled_from(["gpt", "seed"]),
    heads=st.sampled_from([1, 2, 4]),
    head_dim=st.integers(1, 6),
    layers=st.integers(1, 3),
    ratio=st.integers(1, 4),
    activation=st.sampled_from(["gelu", "relu2", "swiglu"]),
    tie=st.booleans(),
    bias=st.booleans(),
    value_embeddings=st.booleans(),
    vocab=st.integers(2, 300),
)
def test_the_bound_is_never_above_a_real_models_parameters(
    kind, heads, head_dim, layers, ratio, activation, tie, bias, value_embeddings, vocab
):
    config = {"kind": kind, "context_window": 8, "embedding_dim": heads * head_dim, "num_heads": heads}
    if kind == "gpt":
        config |= {"num_layers": layers, "mlp_ratio": ratio, "activation": activation, "tie_weights": tie}
        config |= {"bias": bias, "value_embeddings": value_embeddings}
    assert parameters_of(config, vocab) == count_parameters(build_model(config, vocab))
