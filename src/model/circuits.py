"""What each head computes, read off its weights (Elhage et al. 2021, "A Mathematical Framework for
Transformer Circuits"). Every circuit here is a V x V table (V = 65 characters): small enough to show whole.

With W_E the token embedding (V, d), W_U the unembedding (d, V) and, for head h of layer l,
W_Q^h, W_K^h, W_V^h (d, d_head) and W_O^h (d_head, d):

    direct path     W_E W_U                                          (V, V): the zero-layer "bigram" logits
    QK circuit      W_E W_Q^h (W_K^h)^T W_E^T / sqrt(d_head)          (V, V): rows query token, columns key token
    OV circuit      W_E W_V^h W_O^h W_U                               (V, V): rows attended token, columns logit
    positional QK   W_pos W_Q^h (W_K^h)^T W_pos^T / sqrt(d_head)      (T, T): rows query position, columns key
    positivity(M)   sum_i lambda_i / sum_i |lambda_i|   (lambda: M's eigenvalues; the sum is real, = trace M)

and, for head h1 of layer l1 writing into head h2 of a later layer l2 (W_OV = W_V W_O, W_QK = W_Q W_K^T):

    Q-composition   ||W_OV^h1 W_QK^h2||_F   / (||W_OV^h1||_F ||W_QK^h2||_F)
    K-composition   ||W_OV^h1 W_QK^h2^T||_F / (||W_OV^h1||_F ||W_QK^h2||_F)
    V-composition   ||W_OV^h1 W_OV^h2||_F   / (||W_OV^h1||_F ||W_OV^h2||_F)

(TransformerLens's `all_composition_scores`: zero where l2 <= l1). The QK circuit carries the 1/sqrt(d_head)
the scores are divided by, so its entries are the scores themselves; TransformerLens's `QK` does not.

The norms are folded into the matrices as TransformerLens folds them (fold_ln, center_writing_weights,
center_unembed), approximating each norm's scale 1/sigma(x) as a constant, 1 (the paper's and TL's
approximation; it is exact for the QK circuit under qk_norm, below):
    a norm's gain g goes into the matrices that read it: W_Q -> diag(g) W_Q, and W_U -> diag(g_final) W_U;
    a LayerNorm subtracts the mean, so its readers are centred over d, W -> (I - 11^T/d) W, and so are
    the matrices that write what only LayerNorms read: W_E, W_pos and (GPT) W_O -> W (I - 11^T/d);
    softmax ignores a constant added to every logit, so W_U's columns are centred over the vocabulary
    (not under logit_softcap, which is not shift-invariant);
    biases add the same to every token and are left out, as TL's circuits leave them out.
W_E is the embedding as the model adds it, E * sqrt(d) where the model scales it; W_U is E^T (tied) or W_vocab.

Per model kind and option:
    GPT: the direct path goes around every head and MLP (MLPs are skipped: only the embedding's own
        path to the logits); for layers after the first the QK and OV circuits are those of the token's
        own embedding in the residual stream, not of what earlier layers wrote (that is composition).
    SeedGPT: no residual stream, so there is no direct path (None); W_U is W_out, W_O is not centred
        (nothing normalises the heads' output) and is the head's slice of the identity without W_O.
    GQA (num_kv_heads=k): query head h reads key/value head h // (h_total / k), as the forward does.
    smeared keys: the QK circuit is of the key token's own, unsmeared key; the score at (i, j) is
        s M[x_i, x_j] + (1 - s) M[x_i, x_{j-1}], s = sigmoid(alpha) ("smear" in `circuits`). Positions are
        fixed, so positional_qk mixes key columns j and j-1 exactly so.
    value embeddings: V = X W_V + E_V[token], so the OV circuit is (W_E W_V^h + E_V^h) W_O^h W_U, the
        token's two value paths; composition reads only W_V (E_V does not read the residual stream).
    qk_norm: q = RMSNorm(x W_Q) g_q is not linear in x, so the QK circuit (and positional_qk) is computed
        one input at a time, q_a = RMSNorm(W_E[a] W_Q) g_q; the input's scale cancels in the RMSNorm, so
        this is the exact score of a token (position) alone. Composition scores take the RMSNorm's scale
        as constant (the gains folded into W_Q, W_K).
    rope: Q and K turn by the angle of their position, so a score depends on the token pair and the
        offset; the QK circuit is that of query and key at offset 0 (no turn). There is no positional
        code to read: positional_qk returns None.
    attention_window: the mask acts after the scores; the circuits are the scores before it.

Imports only torch; everything is computed in float64 on the CPU and returned as float32.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from src.model.gpt import GPT
from src.model.layers import LayerNorm, RMSNorm, SinusoidalPositionalEncoding


@dataclass
class Folded:
    """The matrices the circuits are made of, norms folded (module docstring), float64 on the CPU."""

    W_E: Tensor  # (V, d)
    W_pos: Tensor | None  # (T, d); None under rope
    W_U: Tensor  # (d, V)
    W_Q: Tensor  # (L, h, d, d_head)
    W_K: Tensor  # (L, h, d, d_head), key/value heads repeated for GQA
    W_V: Tensor  # (L, h, d, d_head)
    W_O: Tensor  # (L, h, d_head, d)
    E_V: Tensor | None  # (L, h, V, d_head): value embeddings, or None
    q_gain: Tensor | None  # (L, d_head): qk_norm's gains, or None
    k_gain: Tensor | None  # (L, d_head)
    qk_eps: float  # qk_norm's eps
    smear: Tensor | None  # (L, h): s = sigmoid(alpha) of the smeared keys, or None
    residual: bool  # a residual stream (GPT): there is a direct path

    @property
    def d_head(self) -> int:
        return self.W_Q.shape[-1]


def _f64(t: Tensor) -> Tensor:
    return t.detach().to("cpu", torch.float64)


def _centred(W: Tensor, dim: int) -> Tensor:
    """W minus its mean over `dim`: what a LayerNorm's mean subtraction leaves of it."""
    return W - W.mean(dim=dim, keepdim=True)


def _read_through(norm: nn.Module, W: Tensor) -> Tensor:
    """A matrix W (d, n) that reads a norm's output, the norm folded in: diag(g) W, then centred over d
    after a LayerNorm (RMSNorm subtracts no mean)."""
    if norm.gain is not None:
        W = _f64(norm.gain)[:, None] * W
    return _centred(W, 0) if isinstance(norm, LayerNorm) else W


def _heads(W: Tensor, n: int) -> Tensor:
    """(d, n d_head) -> (n, d, d_head): a projection's columns per head."""
    d = W.shape[0]
    return W.reshape(d, n, -1).permute(1, 0, 2)


def folded_weights(model: nn.Module) -> Folded:
    """The model's matrices with its norms folded in (the module docstring says how), either kind."""
    cfg = model.cfg
    residual = isinstance(model, GPT)
    layers = list(model.blocks) if residual else [model]
    attentions = [layer.attention for layer in layers]
    norms = [layer.ln_1 if residual else model.ln for layer in layers]
    layer_norm = cfg.norm == "layer"
    embedding = model.embedding
    W_E = _f64(embedding.E) * embedding.scale
    position = embedding.position
    W_pos = None
    if position is not None:
        W_pos = _f64(position.pe if isinstance(position, SinusoidalPositionalEncoding) else position.weight)
    if layer_norm:  # centre_writing_weights: only LayerNorms read the embedding
        W_E = _centred(W_E, 1)
        W_pos = None if W_pos is None else _centred(W_pos, 1)
    if residual:
        W_vocab = _f64(embedding.E).t() if model.W_vocab is None else _f64(model.W_vocab)
        W_U = _read_through(model.ln_f, W_vocab)
    else:
        W_U = _f64(model.W_out)
    if cfg.logit_softcap is None:  # centre_unembed
        W_U = _centred(W_U, 1)

    h, d = cfg.num_heads, cfg.embedding_dim
    group = h // attentions[0].num_kv_heads
    W_Q, W_K, W_V, W_O, E_V = [], [], [], [], []
    for layer, norm, attention in zip(layers, norms, attentions, strict=True):
        W_Q.append(_heads(_read_through(norm, _f64(attention.W_Q)), h))
        kv = attention.num_kv_heads
        W_K.append(_heads(_read_through(norm, _f64(attention.W_K)), kv).repeat_interleave(group, 0))
        W_V.append(_heads(_read_through(norm, _f64(attention.W_V)), kv).repeat_interleave(group, 0))
        out = torch.eye(d, dtype=torch.float64) if attention.W_O is None else _f64(attention.W_O)
        if residual and layer_norm:  # centre_writing_weights: the heads write into the residual stream
            out = _centred(out, 1)
        W_O.append(out.reshape(h, -1, d))  # (h, d_head, d): head i's rows of W_O
        table = layer.E_V if residual else None
        if table is not None:  # (V, kv d_head) -> (h, V, d_head)
            E_V.append(_f64(table).reshape(table.shape[0], kv, -1).permute(1, 0, 2).repeat_interleave(group, 0))
    qk_norm = isinstance(attentions[0].q_norm, RMSNorm)

    def gains(which: str) -> Tensor | None:
        if not qk_norm:
            return None
        ones = torch.ones(len(attentions), W_Q[0].shape[-1], dtype=torch.float64)
        rows = [getattr(a, which).gain for a in attentions]
        return torch.stack([_f64(g) for g in rows]) if rows[0] is not None else ones

    smear = None
    if attentions[0].smear is not None:
        smear = torch.stack([torch.sigmoid(_f64(a.smear)).repeat_interleave(group) for a in attentions])
    return Folded(
        W_E=W_E,
        W_pos=W_pos,
        W_U=W_U,
        W_Q=torch.stack(W_Q),
        W_K=torch.stack(W_K),
        W_V=torch.stack(W_V),
        W_O=torch.stack(W_O),
        E_V=torch.stack(E_V) if E_V else None,
        q_gain=gains("q_norm"),
        k_gain=gains("k_norm"),
        qk_eps=attentions[0].q_norm.eps if qk_norm else 0.0,
        smear=smear,
        residual=residual,
    )


def _rms_normed(x: Tensor, gain: Tensor, eps: float) -> Tensor:
    """qk_norm's RMSNorm of each row: x / sqrt(mean(x^2) + eps) * g. gain broadcasts over the rows."""
    return x / torch.sqrt((x**2).mean(dim=-1, keepdim=True) + eps) * gain


def _scores(f: Folded, X: Tensor) -> Tensor:
    """The QK pattern of inputs X (n, d) against themselves for every head: (L, h, n, n), / sqrt(d_head)."""
    q, k = _qk_factors(f, X)
    return q @ k.transpose(-2, -1)


def _ov(f: Folded) -> Tensor:
    """Every head's OV circuit, (L, h, V, V)."""
    values, out = _ov_factors(f)
    return values @ out


def _qk_factors(f: Folded, X: Tensor) -> tuple[Tensor, Tensor]:
    """Every head's queries and keys of inputs X (n, d) as (q / sqrt(d_head), k), (L, h, n, d_head) each:
    the QK pattern of X against itself is their product q k^T / sqrt(d_head)."""
    q, k = X @ f.W_Q, X @ f.W_K  # (L, h, n, d_head)
    if f.q_gain is not None:  # qk_norm: each input's q and k normalised, as the forward does
        q = _rms_normed(q, f.q_gain[:, None, None, :], f.qk_eps)
        k = _rms_normed(k, f.k_gain[:, None, None, :], f.qk_eps)
    return q / math.sqrt(f.d_head), k


def _ov_factors(f: Folded) -> tuple[Tensor, Tensor]:
    """Every head's OV circuit as (values, out), (L, h, V, d_head) and (L, h, d_head, V): the circuit is
    values @ out = (W_E W_V^h (+ E_V^h)) (W_O^h W_U)."""
    values = f.W_E @ f.W_V  # (L, h, V, d_head)
    if f.E_V is not None:
        values = values + f.E_V
    return values, f.W_O @ f.W_U


def _positional(f: Folded) -> Tensor | None:
    """Every head's positional QK pattern (L, h, T, T), keys smeared as the forward smears them."""
    if f.W_pos is None:
        return None
    P = _scores(f, f.W_pos)
    if f.smear is not None:  # k'_j = s k_j + (1 - s) k_{j-1}, k'_0 = k_0: linear in the key column
        before = torch.cat([P[..., :1], P[..., :-1]], dim=-1)
        s = f.smear[..., None, None]
        P = s * P + (1 - s) * before
    return P


def direct_path(model: nn.Module) -> Tensor | None:
    """W_E W_U (V, V): the logits a token gives the next without any head or MLP (the zero-layer model's
    bigram table). None for the seed model, which has no residual stream to carry the token past its head."""
    f = folded_weights(model)
    return (f.W_E @ f.W_U).float() if f.residual else None


def qk_circuit(model: nn.Module, layer: int, head: int) -> Tensor:
    """W_E W_Q^h (W_K^h)^T W_E^T / sqrt(d_head) (V, V): the score a query token (row) gives a key token
    (column), before positions, the mask and the softmax."""
    f = folded_weights(model)
    return _scores(f, f.W_E)[layer, head].float()


def ov_circuit(model: nn.Module, layer: int, head: int) -> Tensor:
    """W_E W_V^h W_O^h W_U (V, V): what attending to a token (row) adds to each next-token logit (column)."""
    return _ov(folded_weights(model))[layer, head].float()


def positional_qk(model: nn.Module, layer: int, head: int) -> Tensor | None:
    """W_pos W_Q^h (W_K^h)^T W_pos^T / sqrt(d_head) (T, T): the score a query position gives a key position
    from the positional codes alone (learned or sinusoidal). None under rope: no code is added to X."""
    P = _positional(folded_weights(model))
    return None if P is None else P[layer, head].float()


def positivity(M: Tensor) -> float:
    """sum_i lambda_i / sum_i |lambda_i| of M's eigenvalues: +1 when all are positive (a copying OV circuit:
    attending to a token raises that token's logit), -1 when all are negative. 0 for a zero matrix."""
    eigenvalues = torch.linalg.eigvals(M.double())
    magnitude = eigenvalues.abs().sum()
    return float(eigenvalues.sum().real / magnitude) if magnitude > 0 else 0.0


def _positivities(left: Tensor, right: Tensor) -> Tensor:
    """positivity() of each product left @ right of a batch, left (..., n, r), right (..., r, n) -> (...), from
    the eigenvalues of right @ left (r x r): AB and BA have the same nonzero eigenvalues, and r = d_head
    is under half of V = 65, so this is the cheaper of the two."""
    eigenvalues = torch.linalg.eigvals(right @ left)
    magnitude = eigenvalues.abs().sum(dim=-1)
    return torch.where(magnitude > 0, eigenvalues.sum(dim=-1).real / magnitude.clamp_min(1e-300), 0.0)


def bigram_log_probs(tokens: Tensor, vocab_size: int) -> Tensor:
    """log p(next | current) (V, V) of a text's token ids (N,): add-one (Laplace) smoothing,
    p(b | a) = (count(a b) + 1) / (count(a) + V), so characters never seen together are not -inf."""
    tokens = tokens.flatten().long().cpu()
    pairs = tokens[:-1] * vocab_size + tokens[1:]
    counts = torch.bincount(pairs, minlength=vocab_size * vocab_size).view(vocab_size, vocab_size).double() + 1
    return (counts / counts.sum(dim=1, keepdim=True)).log().float()


def correlation(a: Tensor, b: Tensor) -> float:
    """Pearson's correlation of two tensors' entries."""
    a, b = a.flatten().double(), b.flatten().double()
    a, b = a - a.mean(), b - b.mean()
    denominator = a.norm() * b.norm()
    return float(a @ b / denominator) if denominator > 0 else 0.0


def _factored_norms(A1: Tensor, A2: Tensor, B1: Tensor, B2: Tensor) -> Tensor:
    """||A B||_F / (||A||_F ||B||_F) for A = A1 A2 of every head (l1, h1) and B = B1 B2 of every head (l2, h2):
    A1 (L, h, d, r), A2 (L, h, r, d), B1 (L, h, d, r), B2 (L, h, r, d) -> (L, h, L, h), in one matmul.
    With A1 = Q R and B2^T = Q' R' (QR), ||A1 M B2||_F = ||R M R'^T||_F (Q, Q' keep norms), so every pair's
    product is a block of X Y, X = R A2 stacked over (l1, h1) (L h r, d), Y = B1 R'^T side by side (d, L h r)."""
    L, h, r, d = A2.shape
    X = torch.linalg.qr(A1, mode="r").R @ A2  # (L, h, r, d)
    Y = B1 @ torch.linalg.qr(B2.transpose(-2, -1), mode="r").R.transpose(-2, -1)  # (L, h, d, r)
    blocks = X.reshape(L * h * r, d) @ Y.permute(2, 0, 1, 3).reshape(d, L * h * r)  # (L h r, L h r)
    product = blocks.view(L, h, r, L, h, r).square().sum(dim=(2, 5)).sqrt()  # (L, h, L, h)
    norm_A, norm_B = X.square().sum(dim=(-2, -1)).sqrt(), Y.square().sum(dim=(-2, -1)).sqrt()  # (L, h)
    return product / (norm_A[:, :, None, None] * norm_B[None, None]).clamp_min(1e-300)


def _composition(f: Folded) -> dict[str, Tensor]:
    W_Q, W_K = f.W_Q, f.W_K
    if f.q_gain is not None:  # qk_norm: the RMSNorm's scale taken as constant, its gains folded in
        W_Q, W_K = W_Q * f.q_gain[:, None, None, :], W_K * f.k_gain[:, None, None, :]
    left = (f.W_V, f.W_O)  # W_OV of the earlier head
    scores = {
        "q": _factored_norms(*left, W_Q, W_K.transpose(-2, -1)),  # W_OV W_Q W_K^T
        "k": _factored_norms(*left, W_K, W_Q.transpose(-2, -1)),  # W_OV (W_Q W_K^T)^T
        "v": _factored_norms(*left, f.W_V, f.W_O),  # W_OV W_OV
    }
    L = W_Q.shape[0]
    later = torch.arange(L)[:, None] < torch.arange(L)[None, :]  # l1 < l2
    return {key: (s * later[:, None, :, None]).float() for key, s in scores.items()}


def composition_scores(model: nn.Module) -> dict[str, Tensor]:
    """{"q", "k", "v"}: (L, h, L, h), entry [l1, h1, l2, h2] how much head h2 of layer l2 reads (through its
    query, key or value) what head h1 of layer l1 writes; zero where l2 <= l1 (module docstring)."""
    return _composition(folded_weights(model))


def circuits(model: nn.Module, bigrams: Tensor | None = None) -> dict[str, Any]:
    """Every circuit of every head, from one folding of the weights (float32 on the CPU):

    "direct" (V, V) or None, "qk" and "ov" (L, h, V, V), "positional" (L, h, T, T) or None,
    "positivity": {"qk", "ov"} (L, h), "composition": {"q", "k", "v"} (L, h, L, h), "smear" (L, h) or None,
    and "direct_correlation": the correlation of the direct path with `bigrams` (the text's log p(next |
    current), bigram_log_probs), each row centred first (logits mean the same up to a constant per row);
    None without bigrams or a direct path.
    """
    with torch.no_grad():
        f = folded_weights(model)
        (q, k), (values, out) = _qk_factors(f, f.W_E), _ov_factors(f)
        qk, ov = q @ k.transpose(-2, -1), values @ out
        direct = f.W_E @ f.W_U if f.residual else None
        positional = _positional(f)
        result: dict[str, Any] = {
            "direct": None if direct is None else direct.float(),
            "qk": qk.float(),
            "ov": ov.float(),
            "positional": None if positional is None else positional.float(),
            "positivity": {
                "qk": _positivities(q, k.transpose(-2, -1)).float(),
                "ov": _positivities(values, out).float(),
            },
            "composition": _composition(f),
            "smear": None if f.smear is None else f.smear.float(),
            "direct_correlation": None,
        }
        if direct is not None and bigrams is not None:
            result["direct_correlation"] = correlation(_centred(direct, 1), _centred(bigrams.double(), 1))
    return result
