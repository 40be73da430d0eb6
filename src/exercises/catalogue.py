"""The exercises: each one a piece of the notes in src/model/, the notes' step it is, its formula, and
the project's own tests that check it. Tests are named by file basename and function (every test file
has a unique basename), so a test moved to another folder is still found; a renamed one fails
tests/exercises/test_exercises_graded.py, not a learner."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Exercise:
    name: str
    step: str  # the notes' step, in the notes' words
    module: str  # where the reference lives
    reference: str  # a function, or a class whose `methods` are the exercise
    methods: tuple[str, ...]  # empty: the function itself; else the methods of the class to write
    notes: str  # the notes' formula and what to watch for, added to the docstring
    tests: tuple[str, ...]  # "<file basename>::<test function>"
    uses: str = ""  # import lines the learner's file needs beyond the reference module's own


EXERCISES: dict[str, Exercise] = {
    e.name: e
    for e in [
        Exercise(
            "causal_mask",
            "the causal mask",
            "src.model.attention",
            "causal_mask",
            (),
            """The notes: position i may attend to positions j <= i only. The mask is added to the scores
before the softmax, M[i, j] = -inf if j > i, else 0. Here it is a bool tensor, True where j > i
(above the diagonal), shaped (1, 1, T, T) to broadcast over (batch, heads):

    causal_mask(3)[0, 0] = [[False, True,  True ],
                            [False, False, True ],
                            [False, False, False]]

With a sliding window w (window=w), query i sees keys i-w+1 .. i only: also True where j <= i - w.""",
            (
                "test_attention.py::test_mask_of_five_positions_matches_the_notes",
                "test_attention.py::test_a_sliding_window_also_masks_the_keys_older_than_w",
                "test_attention.py::test_worked_example_of_the_notes",
                "test_attention.py::test_masking_after_the_softmax_is_wrong",
                "test_attention.py::test_plain_attention_equals_torch_kernel",
            ),
        ),
        Exercise(
            "softmax",
            "softmax: scores to weights",
            "src.model.attention",
            "softmax",
            (),
            """The notes: weights = softmax(scores), each row sums to 1:

    softmax(s)_j = exp(s_j) / sum_k exp(s_k)
                 = exp(s_j - max s) / sum_k exp(s_k - max s)     (the same number, no overflow)

exp(-inf) = 0 is how the masked positions drop out; a score of 1000 must not overflow.""",
            (
                "test_attention.py::test_softmax_matches_torch_and_survives_large_scores",
                "test_attention.py::test_worked_example_of_the_notes",
                "test_attention.py::test_masking_after_the_softmax_is_wrong",
                "test_attention.py::test_plain_attention_equals_torch_kernel",
            ),
        ),
        Exercise(
            "attention",
            "scaled dot-product attention",
            "src.model.attention",
            "scaled_dot_product_attention",
            (),
            """The notes:

    scores  = Q K^T / sqrt(d_k)                      (..., T_q, T_k)
    scores  = scores + M,  M = -inf where mask       (before the softmax, never after)
    weights = softmax(scores)                        (each row sums to 1)
    context = weights V                              (..., T_q, d_v)

Use `softmax` (imported above) and `masked_fill(mask, float("-inf"))`; apply dropout to the weights
only when `dropout > 0 and training` (torch.nn.functional.dropout).""",
            (
                "test_attention.py::test_worked_example_of_the_notes",
                "test_attention.py::test_plain_attention_equals_torch_kernel",
                "test_attention.py::test_single_head_shapes_and_trace",
                "test_attention.py::test_multi_head_equals_separate_heads_concatenated",
                "test_attention.py::test_fused_attention_equals_plain",
                "test_attention.py::test_dropout_drops_the_weights_in_training_only",
            ),
            "from src.model.attention import softmax",
        ),
        Exercise(
            "heads",
            "the multi-head split and concatenation",
            "src.model.attention",
            "MultiHeadAttention",
            ("split_heads", "merge_heads"),
            """The notes: the h heads are slices of d_head = d_model / h columns. Split: reshape
(B, T, h * d_head) -> (B, T, h, d_head), then transpose to (B, h, T, d_head), so each head is a batch
of its own (h = num_heads when given, else self.num_heads: keys and values may have fewer heads).
Merge is the inverse, transpose back and reshape to (B, T, d_model): that is the concatenation of
the heads, head 0's columns first. self.num_heads, self.d_head and self.d_model are set in __init__.""",
            (
                "test_attention.py::test_heads_are_split_by_reshape_and_transpose",
                "test_attention.py::test_multi_head_equals_separate_heads_concatenated",
                "test_attention.py::test_fused_attention_equals_plain",
            ),
        ),
        Exercise(
            "layer_norm",
            "layer norm",
            "src.model.layers",
            "LayerNorm",
            ("forward",),
            """The notes: over the last dimension (of size d),

    mean = (1/d) sum_i x_i
    var  = (1/d) sum_i (x_i - mean)^2        (the biased variance: divide by d, not d - 1)
    y    = (x - mean) / sqrt(var + eps) * gain + bias

gain and bias may be None (the notes' own model has neither): skip them then.""",
            (
                "test_layers.py::test_layer_norm_matches_torch",
                "test_layers.py::test_layer_norm_uses_the_biased_variance",
                "test_layers.py::test_layer_norm_adds_its_eps_inside_the_square_root",
            ),
        ),
        Exercise(
            "cross_entropy",
            "the loss: cross-entropy",
            "src.model.layers",
            "cross_entropy",
            (),
            """The notes: the loss of a position is -log of the probability the model gave the true
next character,

    CE = -log softmax(z)[target] = -(z_target - log sum_k exp(z_k))

computed as log softmax(z) = (z - max z) - log sum_k exp(z_k - max z), which never takes the log of an
underflowed 0 (a logit of -1000 must give a loss of 2000, not inf). Average over the N positions
unless reduction="none".""",
            (
                "test_layers.py::test_cross_entropy_matches_torch_and_is_stable",
                "test_layers.py::test_cross_entropy_per_position_with_reduction_none",
            ),
        ),
        Exercise(
            "positions",
            "the sinusoidal positional encoding",
            "src.model.layers",
            "sinusoidal_encoding",
            (),
            """The notes: X = E[token] + PE[position], with

    PE(pos, 2i)     = sin(pos / 10000^(2i/d))
    PE(pos, 2i + 1) = cos(pos / 10000^(2i/d))

a (max_len, d) tensor; for an odd d the last column is a sine. Compute in float64, return float32.""",
            (
                "test_layers.py::test_sinusoidal_encoding_is_the_formula",
                "test_layers.py::test_sinusoidal_encoding_is_a_buffer_not_a_parameter",
            ),
        ),
        Exercise(
            "kv_cache",
            "generation with a KV cache",
            "src.model.kv_cache",
            "KVCache",
            ("update",),
            """The notes generate one character at a time. With a cache, each layer computes K and V for
the new positions only and keeps the earlier ones: write K, V (B, h, T, d_head) into
self.keys[layer] and self.values[layer] at positions self.length .. self.length + T, and return
the keys and values of every position so far, (B, h, self.length + T, d_head). Do not change
self.length (advance() does, once every layer has run). Refuse to go past self.max_len with a
ValueError.""",
            (
                "test_sampling.py::test_kv_cache_update_returns_the_positions_so_far_and_refuses_more_than_max_len",
                "test_sampling.py::test_kv_cache_generation_equals_uncached_also_past_the_window",
                "test_sampling.py::test_cached_sampling_reproduces_uncached_with_the_same_generator",
            ),
        ),
    ]
}
