"""Our GPT as Hugging Face's GPT-2: the same network, its weights renamed and laid out as GPT-2 keeps them.

Our default GPT is GPT-2's architecture (pre-LN blocks, GELU MLP, final layer norm), so nothing is
approximated; the differences are bookkeeping:

    ours                                   GPT-2 (transformers.GPT2LMHeadModel)
    E (vocab, d), rows scaled by sqrt(d)   transformer.wte.weight = E * scale (the scale folded in)
      with sinusoidal positions
    the fixed sinusoidal table PE          transformer.wpe.weight = PE (a table of positions)
    W_Q, W_K, W_V (d, d), X @ W            attn.c_attn.weight = [W_Q | W_K | W_V] (d, 3d): Conv1D is X @ W too
    W_O, W_1, W_2                          attn.c_proj, mlp.c_fc, mlp.c_proj (same layout)
    no biases (bias=false)                 zero biases
    exact GELU                             activation_function="gelu" (not GPT-2's tanh "gelu_new")
    logits = H E^T (tied)                  lm_head.weight = E, untied when the scale is folded into wte
    logits = H W_vocab (untied)            lm_head.weight = W_vocab^T

    no MLP (mlp_ratio=0)                   an MLP of one unit with zero weights (adds exactly 0)
    no norm gain (norm_gain=false)         gains of 1

The character tokenizer becomes a `tokenizers` WordLevel model over single characters. The seed
model and every option GPT-2 cannot hold are refused by check_gpt2.
"""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from src.model.gpt import GPT, GPTConfig
from src.model.layers import SinusoidalPositionalEncoding


class NotExportable(ValueError):
    """A model option GPT-2 cannot express; the message names it."""


# The options GPT-2 holds at any value (sizes, dropout, biases, the tied head, the path, norm gains;
# num_kv_heads is checked apart, below). Every other option of GPTConfig must keep its default, which
# is GPT-2's, or a value of ALSO_GPT2: a new option of the model is refused here until it is listed.
GPT2_HOLDS = {"vocab_size", "context_window", "embedding_dim", "num_heads", "num_layers", "mlp_ratio", "dropout"}
GPT2_HOLDS |= {"bias", "tie_weights", "fused", "norm_gain", "num_kv_heads", "scale"}  # scale: sizes only
ALSO_GPT2 = {"positional": ("learned",)}
# Why GPT-2 has no place for an option's other values; an option not named here: it has no such option.
WHY_NOT_GPT2 = {
    "positional": "GPT-2 adds a table of positions to X; rope rotates Q and K instead",
    "norm": "GPT-2's norms are LayerNorms",
    "activation": "GPT-2's MLP is one GELU layer",
    "qk_norm": "GPT-2 does not normalise Q and K",
    "logit_softcap": "GPT-2's logits are not capped",
    "value_embeddings": "GPT-2's values read only the residual stream",
    "smeared_keys": "GPT-2's key at position j is that position's alone, not mixed with j-1's",
}


def check_gpt2(hparams: dict[str, Any], what: str = "format=hf") -> None:
    """Refuse, naming the option, a model GPT-2's architecture cannot hold."""
    kind = hparams.get("kind", "gpt")
    if kind != "gpt":
        raise NotExportable(
            f"model={kind} cannot be exported as {what}: GPT-2 has no model with one attention layer "
            f"and no residual stream or MLP; use format=safetensors, or train model=gpt"
        )
    for option in (f for f in fields(GPTConfig) if f.name not in GPT2_HOLDS):
        value = hparams.get(option.name, option.default)
        if value != option.default and value not in ALSO_GPT2.get(option.name, ()):
            why = WHY_NOT_GPT2.get(option.name, "GPT-2 has no such option")
            raise NotExportable(
                f"model.{option.name}={value} cannot be exported as {what} ({why}): use format=safetensors, "
                f"or train with model.{option.name}={option.default}"
            )
    kv_heads = hparams.get("num_kv_heads")
    if kv_heads is not None and kv_heads != hparams.get("num_heads"):
        raise NotExportable(
            f"model.num_kv_heads={kv_heads} cannot be exported as {what} (GPT-2 gives every head its own K and V): "
            f"use format=safetensors, or train with model.num_kv_heads=null"
        )


def gpt2_config(model: GPT) -> dict[str, Any]:
    """The keyword arguments of transformers.GPT2Config for this model."""
    cfg = model.cfg
    return {
        "vocab_size": cfg.vocab_size,
        "n_positions": cfg.context_window,
        "n_embd": cfg.embedding_dim,
        "n_layer": cfg.num_layers,
        "n_head": cfg.num_heads,
        "n_inner": max(cfg.mlp_ratio * cfg.embedding_dim, 1),  # mlp_ratio 0: one zero unit (below)
        "activation_function": "gelu",  # exact erf GELU, as src/model/layers.gelu
        "resid_pdrop": cfg.dropout,
        "embd_pdrop": cfg.dropout,
        "attn_pdrop": cfg.dropout,
        "layer_norm_epsilon": model.ln_f.eps,
        "scale_attn_weights": True,  # / sqrt(d_head)
        "tie_word_embeddings": tied_in_gpt2(model),
        "bos_token_id": None,
        "eos_token_id": None,
        "pad_token_id": None,
    }


def tied_in_gpt2(model: GPT) -> bool:
    """GPT-2 ties lm_head to wte only when both are the same matrix: ours tied and unscaled."""
    return model.W_vocab is None and model.embedding.scale == 1.0


def gpt2_state_dict(model: GPT) -> dict[str, Tensor]:
    """Our weights under GPT-2's names and layouts (a tied head appears only as wte)."""
    d = model.cfg.embedding_dim

    def bias(b: Tensor | None, n: int) -> Tensor:
        return b.detach().clone() if b is not None else torch.zeros(n)

    def norm(prefix: str, ln: Any) -> dict[str, Tensor]:
        gain = ln.gain.detach().clone() if ln.gain is not None else torch.ones(d)  # model.norm_gain=false
        return {f"{prefix}.weight": gain, f"{prefix}.bias": bias(ln.bias, d)}

    embedding = model.embedding
    position = embedding.position
    wpe = position.pe if isinstance(position, SinusoidalPositionalEncoding) else position.weight
    state = {
        "transformer.wte.weight": (embedding.E * embedding.scale).detach().clone(),
        "transformer.wpe.weight": wpe.detach().clone(),
        **norm("transformer.ln_f", model.ln_f),
    }
    for i, block in enumerate(model.blocks):
        p, attn, mlp = f"transformer.h.{i}", block.attention, block.mlp
        qkv_bias = attn.b_QKV.detach().flatten().clone() if attn.b_QKV is not None else torch.zeros(3 * d)
        state |= {
            **norm(f"{p}.ln_1", block.ln_1),
            f"{p}.attn.c_attn.weight": torch.cat([attn.W_Q, attn.W_K, attn.W_V], dim=1).detach().clone(),  # (d, 3d)
            f"{p}.attn.c_attn.bias": qkv_bias,
            f"{p}.attn.c_proj.weight": attn.W_O.detach().clone(),
            f"{p}.attn.c_proj.bias": bias(attn.b_O, d),
        }
        if mlp is None:  # attention-only (mlp_ratio 0): an MLP of one unit whose weights are 0 adds 0
            ln_2, hidden = {f"{p}.ln_2.weight": torch.ones(d), f"{p}.ln_2.bias": torch.zeros(d)}, 1
            W_1, W_2, b_1, b_2 = torch.zeros(d, hidden), torch.zeros(hidden, d), None, None
        else:
            ln_2, hidden = norm(f"{p}.ln_2", block.ln_2), mlp.W_1.shape[1]
            W_1, W_2, b_1, b_2 = mlp.W_1.detach().clone(), mlp.W_2.detach().clone(), mlp.b_1, mlp.b_2
        state |= {
            **ln_2,
            f"{p}.mlp.c_fc.weight": W_1,  # (d, hidden)
            f"{p}.mlp.c_fc.bias": bias(b_1, hidden),
            f"{p}.mlp.c_proj.weight": W_2,  # (hidden, d)
            f"{p}.mlp.c_proj.bias": bias(b_2, d),
        }
    if not tied_in_gpt2(model):
        W_vocab = embedding.E.t() if model.W_vocab is None else model.W_vocab  # (d, vocab)
        state["lm_head.weight"] = W_vocab.t().detach().contiguous().clone()  # nn.Linear: (vocab, d)
    return state


def char_tokenizer(vocab: list[str], unknown: str | None = None) -> Any:
    """A `tokenizers` Tokenizer: every character its own token, ids as in our vocabulary. A character
    outside it is refused, as CharTokenizer refuses it, unless `unknown` names a token (id len(vocab))."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

    ids = {ch: i for i, ch in enumerate(vocab)} | ({unknown: len(vocab)} if unknown else {})
    tokenizer = Tokenizer(models.WordLevel(ids, unk_token=unknown))
    tokenizer.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    tokenizer.decoder = decoders.Fuse()
    return tokenizer


def write_hf(model: GPT, vocab: list[str], folder: Path) -> None:
    """config.json, model.safetensors, tokenizer.json and tokenizer_config.json into `folder`."""
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    hf_model = GPT2LMHeadModel(GPT2Config(**gpt2_config(model)))
    missing, unexpected = hf_model.load_state_dict(gpt2_state_dict(model), strict=False)
    # A tied head is lm_head = wte: GPT-2 lists it as missing and fills it by tying.
    if unexpected or set(missing) - {"lm_head.weight"}:
        raise RuntimeError(f"GPT-2's names do not match ours: missing {missing}, unexpected {unexpected}")
    hf_model.save_pretrained(folder)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=char_tokenizer(vocab),
        model_max_length=model.cfg.context_window,
        clean_up_tokenization_spaces=False,
    )
    tokenizer.save_pretrained(folder)
