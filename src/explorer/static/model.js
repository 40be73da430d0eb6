// The forward pass of src/model/, in the browser: the same formulas, one function each.
//
// A tensor is a flat Float64Array in row-major order; the comment beside it gives its shape:
// (T, d) holds T rows of d numbers, element [t, i] at index t * d + i. Weights arrive as
// Float32Array (what PyTorch trained), activations are computed in double precision.
"use strict";

/** out = X W:  X (T, K) times W (K, N) -> (T, N), as out[t, n] = sum_k X[t, k] W[k, n].
 *  W comes transposed, WT = W^T (N, K), so that both factors of each sum are read in order. The
 *  sums are added in WebAssembly SIMD where the browser has it (kernel.js: ~4x faster, within
 *  1e-12 of the loops below), else by `matmulScalar`; `useKernel(false)` chooses the loops. */
let kernelOn = KERNEL !== null;
function useKernel(on) {
  kernelOn = on && KERNEL !== null;
  return kernelOn;
}
/** Where matmul adds its sums, in words. */
function kernelName() {
  return kernelOn ? "WebAssembly SIMD" : "JavaScript";
}
function matmul(X, WT, T, K, N) {
  return kernelOn ? KERNEL.matmul(X, WT, T, K, N) : matmulScalar(X, WT, T, K, N);
}

/** `matmul` in plain JavaScript: four rows of X meet four columns of W at a time, each number loaded
 *  once for four products (sixteen sums in registers); the rows and columns left over are summed
 *  one by one. The same sums, faster in V8 than the textbook triple loop (BENCHMARKS.md, "Explorer page"). */
function matmulScalar(X, WT, T, K, N) {
  const out = new Float64Array(T * N);
  const T4 = T - (T % 4), N4 = N - (N % 4);
  for (let t = 0; t < T4; t += 4) {
    const x0 = t * K, x1 = x0 + K, x2 = x1 + K, x3 = x2 + K;
    for (let n = 0; n < N4; n += 4) {
      const w0 = n * K, w1 = w0 + K, w2 = w1 + K, w3 = w2 + K;
      let a0 = 0, a1 = 0, a2 = 0, a3 = 0, b0 = 0, b1 = 0, b2 = 0, b3 = 0;
      let c0 = 0, c1 = 0, c2 = 0, c3 = 0, e0 = 0, e1 = 0, e2 = 0, e3 = 0;
      for (let k = 0; k < K; k++) {
        const p = X[x0 + k], q = X[x1 + k], r = X[x2 + k], s = X[x3 + k];
        const u0 = WT[w0 + k], u1 = WT[w1 + k], u2 = WT[w2 + k], u3 = WT[w3 + k];
        a0 += p * u0; a1 += p * u1; a2 += p * u2; a3 += p * u3;
        b0 += q * u0; b1 += q * u1; b2 += q * u2; b3 += q * u3;
        c0 += r * u0; c1 += r * u1; c2 += r * u2; c3 += r * u3;
        e0 += s * u0; e1 += s * u1; e2 += s * u2; e3 += s * u3;
      }
      const o0 = t * N + n, o1 = o0 + N, o2 = o1 + N, o3 = o2 + N;
      out[o0] = a0; out[o0 + 1] = a1; out[o0 + 2] = a2; out[o0 + 3] = a3;
      out[o1] = b0; out[o1 + 1] = b1; out[o1 + 2] = b2; out[o1 + 3] = b3;
      out[o2] = c0; out[o2 + 1] = c1; out[o2 + 2] = c2; out[o2 + 3] = c3;
      out[o3] = e0; out[o3 + 1] = e1; out[o3 + 2] = e2; out[o3 + 3] = e3;
    }
  }
  const dot = (t, n) => { // one sum: a row or a column left over
    let s = 0;
    for (let k = 0; k < K; k++) s += X[t * K + k] * WT[n * K + k];
    out[t * N + n] = s;
  };
  for (let t = 0; t < T4; t++) for (let n = N4; n < N; n++) dot(t, n);
  for (let t = T4; t < T; t++) for (let n = 0; n < N; n++) dot(t, n);
  return out;
}

/** X + b, the vector b (N,) added to every row of X (T, N), in place. */
function addBias(X, b, N) {
  if (b) for (let i = 0; i < X.length; i++) X[i] += b[i % N];
  return X;
}

/** A + B, elementwise: the residual connection. */
function add(A, B) {
  const out = new Float64Array(A.length);
  for (let i = 0; i < A.length; i++) out[i] = A[i] + B[i];
  return out;
}

/** A^T: (R, C) -> (C, R). */
function transpose(A, R, C) {
  const out = new Float64Array(R * C);
  for (let r = 0; r < R; r++) for (let c = 0; c < C; c++) out[c * R + r] = A[r * C + c];
  return out;
}

/** y = (x - mean) / sqrt(var + eps) * gain + bias over each row of X (T, d); var is the biased one. */
function layerNorm(X, T, d, gain, bias, eps = 1e-5) {
  const out = new Float64Array(T * d);
  for (let t = 0; t < T; t++) {
    let mean = 0;
    for (let i = 0; i < d; i++) mean += X[t * d + i];
    mean /= d;
    let variance = 0;
    for (let i = 0; i < d; i++) variance += (X[t * d + i] - mean) ** 2;
    variance /= d;
    const scale = 1 / Math.sqrt(variance + eps);
    for (let i = 0; i < d; i++) {
      let y = (X[t * d + i] - mean) * scale;
      if (gain) y *= gain[i];
      if (bias) y += bias[i];
      out[t * d + i] = y;
    }
  }
  return out;
}

/** y = x / sqrt(mean(x^2) + eps) * gain over each row of X (T, d): RMSNorm, LayerNorm without the mean. */
function rmsNorm(X, T, d, gain, eps = 1e-5) {
  const out = new Float64Array(T * d);
  for (let t = 0; t < T; t++) {
    let meanSquare = 0;
    for (let i = 0; i < d; i++) meanSquare += X[t * d + i] ** 2;
    const scale = 1 / Math.sqrt(meanSquare / d + eps);
    for (let i = 0; i < d; i++) out[t * d + i] = X[t * d + i] * scale * (gain ? gain[i] : 1);
  }
  return out;
}

/** model.norm: "layer" (LayerNorm) or "rms" (RMSNorm, which has no bias). */
function norm(model, X, T, d, gain, bias) {
  return model.config.norm === "rms" ? rmsNorm(X, T, d, gain) : layerNorm(X, T, d, gain, bias);
}

/** RoPE: pair (x_i, x_{i+d/2}) of a head's query or key at position m turns by m theta_i,
 *  theta_i = 10000^(-2i/d_head):  x' = x cos + rotate_half(x) sin,  rotate_half(x) = [-x_2, x_1].
 *  A (T, dK) array, rotated in place; cos and sin rounded to float32 as PyTorch stores them. */
function rotate(A, T, dK) {
  const half = dK / 2;
  for (let m = 0; m < T; m++) {
    for (let i = 0; i < half; i++) {
      const angle = m * 10000 ** (-(2 * i) / dK);
      const cos = Math.fround(Math.cos(angle)), sin = Math.fround(Math.sin(angle));
      const a = A[m * dK + i], b = A[m * dK + half + i];
      A[m * dK + i] = a * cos - b * sin;
      A[m * dK + half + i] = b * cos + a * sin;
    }
  }
  return A;
}

/** PE(pos, 2i) = sin(pos / 10000^(2i/d)),  PE(pos, 2i+1) = cos(pos / 10000^(2i/d)):  (maxLen, d).
 *  Rounded to float32 as PyTorch stores it. */
function sinusoidalEncoding(maxLen, d) {
  const pe = new Float32Array(maxLen * d);
  for (let pos = 0; pos < maxLen; pos++) {
    for (let twoI = 0; twoI < d; twoI += 2) {
      const angle = pos / 10000 ** (twoI / d);
      pe[pos * d + twoI] = Math.sin(angle);
      if (twoI + 1 < d) pe[pos * d + twoI + 1] = Math.cos(angle);
    }
  }
  return pe;
}

/** erf(x), to double precision: a power series near 0, a continued fraction for erfc beyond.
 *  Up to 60 terms a call: it fills the table of `erf`, which GELU calls. */
function erfSeries(x) {
  const z = Math.abs(x);
  let result;
  if (z < 2.5) {
    // erf(z) = 2/sqrt(pi) * sum_n (-1)^n z^(2n+1) / (n! (2n+1))
    let term = z, sum = z;
    for (let n = 1; n < 60; n++) {
      term *= (-z * z) / n;
      sum += term / (2 * n + 1);
      if (Math.abs(term) < 1e-17 * Math.abs(sum)) break;
    }
    result = (2 / Math.sqrt(Math.PI)) * sum;
  } else {
    // erfc(z) = exp(-z^2)/sqrt(pi) * 1/(z + 1/2/(z + 1/(z + 3/2/(z + 2/(z + ...))))), evaluated from the tail
    let fraction = z;
    for (let k = 60; k >= 1; k--) fraction = z + k / 2 / fraction;
    result = 1 - Math.exp(-z * z) / Math.sqrt(Math.PI) / fraction;
  }
  return x < 0 ? -result : result;
}

/** erf(x) from a table on a grid of step h = 1/64 over [0, 6]: with x0 the nearest grid point and
 *  delta = |x| - x0 (|delta| <= h/2), erf(x0 + delta) = sum_{n=0..6} delta^n / n! erf^(n)(x0), where
 *  erf^(n)(x) = (-1)^(n-1) (2/sqrt(pi)) H_{n-1}(x) exp(-x^2) for n >= 1 (H the Hermite polynomials,
 *  H_0 = 1, H_1 = 2x, H_{n+1} = 2x H_n - 2n H_{n-1}). The next term is below 5e-17; it agrees with
 *  `erfSeries` within 1.2e-14 at 200,000 random points of [-8, 8] (in Chromium), at a few times its
 *  speed, which matters: GELU takes 4 d of them per position and layer. */
const ERF_STEPS = 64, ERF_MAX = 6, ERF_ORDER = 6;
const ERF_TABLE = (() => {
  const table = new Float64Array((ERF_MAX * ERF_STEPS + 1) * (ERF_ORDER + 1));
  for (let k = 0; k <= ERF_MAX * ERF_STEPS; k++) {
    const x = k / ERF_STEPS, g = (2 / Math.sqrt(Math.PI)) * Math.exp(-x * x);
    const c = table.subarray(k * (ERF_ORDER + 1), (k + 1) * (ERF_ORDER + 1));
    c[0] = erfSeries(x);
    let hPrev = 0, h = 1, factorial = 1; // H_{n-1}, starting from H_0
    for (let n = 1; n <= ERF_ORDER; n++) {
      factorial *= n;
      c[n] = ((n % 2 === 1 ? 1 : -1) * g * h) / factorial; // erf^(n)(x) / n!
      [hPrev, h] = [h, 2 * x * h - 2 * (n - 1) * hPrev]; // H_n from H_{n-1} and H_{n-2}
    }
  }
  return table;
})();

function erf(x) {
  const z = Math.abs(x);
  if (z >= ERF_MAX) return x < 0 ? -1 : 1; // erf(6) = 1 - 2e-17
  const k = Math.round(z * ERF_STEPS), delta = z - k / ERF_STEPS, o = k * (ERF_ORDER + 1);
  let y = ERF_TABLE[o + ERF_ORDER];
  for (let n = ERF_ORDER - 1; n >= 0; n--) y = y * delta + ERF_TABLE[o + n]; // Horner
  return x < 0 ? -y : y;
}

/** GELU(x) = x * Phi(x) = 0.5 * x * (1 + erf(x / sqrt 2)), elementwise, in place. */
function gelu(X) {
  for (let i = 0; i < X.length; i++) X[i] = 0.5 * X[i] * (1 + erf(X[i] / Math.SQRT2));
  return X;
}

/** ReLU²(x) = max(0, x)^2, elementwise, in place. */
function relu2(X) {
  for (let i = 0; i < X.length; i++) X[i] = X[i] > 0 ? X[i] * X[i] : 0;
  return X;
}

/** SiLU(x) = x / (1 + exp(-x)): the gate of SwiGLU. */
function silu(x) {
  return x / (1 + Math.exp(-x));
}

/** Logit soft-capping: c tanh(z / c), in place; no cap when c is null. */
function softcap(Z, c) {
  if (c) for (let i = 0; i < Z.length; i++) Z[i] = c * Math.tanh(Z[i] / c);
  return Z;
}

/** softmax(s)_j = exp(s_j - max s) / sum_k exp(s_k - max s), of a vector; exp(-inf) = 0 drops masked entries. */
function softmax(s) {
  let max = -Infinity;
  for (const v of s) if (v > max) max = v;
  const out = new Float64Array(s.length);
  let sum = 0;
  for (let j = 0; j < s.length; j++) sum += out[j] = Math.exp(s[j] - max);
  for (let j = 0; j < s.length; j++) out[j] /= sum;
  return out;
}

/** X = E[token] * scale + PE[position]:  ids (T,) -> (T, d). With RoPE, X = E[token]: no position added. */
function embed(model, ids) {
  const { d } = model;
  const E = model.weight("embedding.E"); // (vocab, d)
  const P = model.positions; // (context_window, d), or null with RoPE
  const X = new Float64Array(ids.length * d);
  for (let t = 0; t < ids.length; t++)
    for (let i = 0; i < d; i++) X[t * d + i] = E[ids[t] * d + i] * model.embeddingScale + (P ? P[t * d + i] : 0);
  return X;
}

/** Head h's columns h*d_k .. (h+1)*d_k - 1 of A (T, width), as (T, d_k). */
function headSlice(A, T, width, h, dK) {
  const out = new Float64Array(T * dK);
  for (let t = 0; t < T; t++) out.set(A.subarray(t * width + h * dK, t * width + (h + 1) * dK), t * dK);
  return out;
}

/** One causal head of Q_h, K_h, V_h (T, d_k) each:  softmax(Q_h K_h^T / sqrt(d_k) + M) V_h.
 *  Returns the steps of the notes: scores (T, T) before the mask, weights (T, T), context (T, d_k).
 *  Row i's softmax is `softmax` written out over the row after the mask, into the weights: the
 *  masked future (j > i) is -inf, exp(-inf) = 0 adds nothing to the sum and stays exactly 0.
 *  A sliding window w (model.attention_window) masks the keys older than it too, j <= i - w:
 *  query i sees keys i-w+1 .. i; window null or 0: every earlier key. */
function attentionHead(Qh, Kh, Vh, T, dK, window = null) {
  const scores = matmul(Qh, Kh, T, dK, T); // Q K^T: K_h (T, d_k) is the transposed factor matmul takes
  const weights = new Float64Array(T * T);
  const root = Math.sqrt(dK);
  for (let i = 0; i < T; i++) {
    const r = i * T;
    const first = window ? Math.max(0, i - window + 1) : 0; // the oldest key query i sees
    let max = -Infinity;
    for (let j = 0; j < T; j++) {
      scores[r + j] /= root; // Q K^T / sqrt(d_k)
      if (j >= first && j <= i && scores[r + j] > max) max = scores[r + j]; // + M: -inf above the diagonal (and before the window), before the softmax
    }
    let sum = 0;
    for (let j = first; j <= i; j++) sum += weights[r + j] = Math.exp(scores[r + j] - max);
    for (let j = first; j <= i; j++) weights[r + j] /= sum; // each row sums to 1
  }
  const context = matmul(weights, transpose(Vh, T, dK), T, T, dK); // weights V, with V_h^T (d_k, T)
  return { scores, weights, context };
}

/** Smeared keys (Olsson et al. 2022) of one key head Kh (T, d_k) with its learned scalar alpha:
 *  k'_j = sigmoid(alpha) k_j + (1 - sigmoid(alpha)) k_{j-1}, and k'_0 = k_0. */
function smearKeys(Kh, T, dK, alpha) {
  const s = 1 / (1 + Math.exp(-alpha)); // sigmoid(alpha)
  const out = new Float64Array(T * dK);
  for (let j = 0; j < T; j++) {
    const before = j > 0 ? j - 1 : 0; // k_{-1} := k_0 gives k'_0 = k_0
    for (let k = 0; k < dK; k++) out[j * dK + k] = s * Kh[j * dK + k] + (1 - s) * Kh[before * dK + k];
  }
  return out;
}

/** Multi-head attention over X (T, d): Q = X W_Q, K = X W_K, V = X W_V, h heads, concatenated, times W_O.
 *  With GQA (num_kv_heads k < h) W_K and W_V give k heads, and query head h reads head floor(h / (h/k));
 *  qk_norm: RMSNorm of each head's q and k; RoPE: q and k rotated by position; value embeddings:
 *  V = X W_V + E_V[token]; smeared keys: each key head's k_j mixed with k_{j-1} after RoPE; a sliding
 *  window: query i sees keys i-w+1 .. i only. Returns Q, K, V as the h query heads use them, (T, d) each.
 *  removed: {head: null | mean (d_k,)}: that head's context, and so its output context W_O^h, replaced by
 *  zeros (zero ablation) or by a fixed vector at every position (mean ablation); its weights stay. */
function multiHeadAttention(model, prefix, X, T, ids, removed = null) {
  const { d, numHeads } = model;
  const dK = d / numHeads;
  const kvHeads = model.config.num_kv_heads || numHeads;
  const dKV = kvHeads * dK;
  const W = (name) => model.matrix(prefix + name);
  const bQKV = model.weight(prefix + "b_QKV"); // (3, d) or absent
  const Q = addBias(matmul(X, W("W_Q"), T, d, d), bQKV && bQKV.subarray(0, d), d); // (T, d)
  const K = addBias(matmul(X, W("W_K"), T, d, dKV), bQKV && bQKV.subarray(d, 2 * d), dKV); // (T, k d_k)
  const V = addBias(matmul(X, W("W_V"), T, d, dKV), bQKV && bQKV.subarray(2 * d), dKV); // (T, k d_k)
  const EV = model.weight(prefix.replace("attention.", "E_V")); // (vocab, k d_k): value embeddings, or absent
  if (EV) for (let t = 0; t < T; t++) for (let i = 0; i < dKV; i++) V[t * dKV + i] += EV[ids[t] * dKV + i];
  const qGain = model.weight(prefix + "q_norm.gain"), kGain = model.weight(prefix + "k_norm.gain");
  const prepare = (A, width, head, gain) => { // one head's (T, d_k): normalised, then rotated, as the model does
    let out = headSlice(A, T, width, head, dK);
    if (model.config.qk_norm) out = rmsNorm(out, T, dK, gain);
    return model.config.positional === "rope" ? rotate(out, T, dK) : out;
  };
  const smear = model.weight(prefix + "smear"); // (k,): alpha_h of the smeared keys, or absent
  const heads = [];
  const used = { Q: new Float64Array(T * d), K: new Float64Array(T * d), V: new Float64Array(T * d) };
  const concat = new Float64Array(T * d); // the heads side by side: (T, h * d_k) = (T, d)
  const place = (into, A, h) => { for (let t = 0; t < T; t++) into.set(A.subarray(t * dK, (t + 1) * dK), t * d + h * dK); };
  for (let h = 0; h < numHeads; h++) {
    const shared = Math.floor(h / (numHeads / kvHeads)); // the key/value head this query head reads
    const [Qh, Vh] = [prepare(Q, d, h, qGain), headSlice(V, T, dKV, shared, dK)];
    const Kraw = prepare(K, dKV, shared, kGain);
    const Kh = smear ? smearKeys(Kraw, T, dK, smear[shared]) : Kraw; // after RoPE, as the model smears
    const head = attentionHead(Qh, Kh, Vh, T, dK, model.config.attention_window);
    heads.push(head);
    place(used.Q, Qh, h);
    place(used.K, Kh, h);
    place(used.V, Vh, h);
    place(concat, removed && h in removed ? ablated(removed[h], T, dK) : head.context, h);
  }
  const out = W("W_O") ? addBias(matmul(concat, W("W_O"), T, d, d), model.weight(prefix + "b_O"), d) : concat; // (T, d)
  return { Q: used.Q, K: used.K, V: used.V, heads, concat, out, dK };
}

/** The position-wise MLP: act(X W_1 + b_1) W_2 + b_2:  (T, d) -> (T, hidden) -> (T, d); act GELU or ReLU².
 *  SwiGLU: (SiLU(X W_1) * (X W_3)) W_2, the gate times the value, with hidden = 2/3 of ratio * d.
 *  trace, if given, receives the hidden layer H (T, hidden), after the activation, for the page's views. */
function mlp(model, prefix, X, T, trace = null) {
  const { d } = model;
  const activation = model.config.activation || "gelu";
  const ratioHidden = model.config.mlp_ratio * d;
  const hidden = activation === "swiglu" ? Math.floor((2 * ratioHidden) / 3) : ratioHidden;
  const H = addBias(matmul(X, model.matrix(prefix + "W_1"), T, d, hidden), model.weight(prefix + "b_1"), hidden);
  if (activation === "swiglu") {
    const value = addBias(matmul(X, model.matrix(prefix + "W_3"), T, d, hidden), model.weight(prefix + "b_3"), hidden);
    for (let i = 0; i < H.length; i++) H[i] = silu(H[i]) * value[i];
  } else if (activation === "relu2") relu2(H);
  else gelu(H);
  if (trace) trace.hidden = H;
  return addBias(matmul(H, model.matrix(prefix + "W_2"), T, hidden, d), model.weight(prefix + "b_2"), d);
}

/** kind "gpt": X_l = X_{l-1} + Attention(LN(X_{l-1})); X_l = X_l + MLP(LN(X_l)); logits = LN(X_N) W_vocab.
 *  Returns the logits (T, vocab), each layer's attention, the residual stream before and after
 *  every layer (for the logit lens), and every block's steps for the data-flow view: input, ln1,
 *  attention, mid = input + attention, ln2, hidden, mlp, output ((T, d) each, hidden (T, hidden);
 *  ln2, hidden and mlp null without an MLP). */
function forwardGPT(model, ids, removed = null) {
  const { d } = model;
  const T = ids.length;
  const w = (name) => model.weight(name);
  let X = embed(model, ids); // X_0: (T, d)
  const stream = [X];
  const attention = [];
  const blocks = [];
  for (let l = 0; l < model.config.num_layers; l++) {
    const p = `blocks.${l}.`;
    const input = X;
    const ln1 = norm(model, X, T, d, w(p + "ln_1.gain"), w(p + "ln_1.bias"));
    const att = multiHeadAttention(model, p + "attention.", ln1, T, ids, removed && removed[l]);
    X = add(X, att.out);
    const mid = X, trace = {};
    let ln2 = null, m = null;
    if (model.config.mlp_ratio > 0) { // mlp_ratio 0: attention-only, no MLP
      ln2 = norm(model, X, T, d, w(p + "ln_2.gain"), w(p + "ln_2.bias"));
      m = mlp(model, p + "mlp.", ln2, T, trace);
      X = add(X, m);
    }
    attention.push(att);
    blocks.push({ input, ln1, attention: att.out, mid, ln2, hidden: trace.hidden ?? null, mlp: m, output: X });
    stream.push(X); // X_l: (T, d)
  }
  const readout = (S) => softcap(matmul(norm(model, S, S.length / d, d, w("ln_f.gain"), w("ln_f.bias")), model.matrix("W_vocab"), S.length / d, d, model.vocabSize), model.config.logit_softcap);
  return { logits: readout(X), attention, stream, readout, blocks, embedded: stream[0] };
}

/** kind "seed", the notes' model: X = LN(E[token] + PE); context = MultiHead(X); logits = context W_out + b_out. */
function forwardSeed(model, ids, removed = null) {
  const { d } = model;
  const T = ids.length;
  const w = (name) => model.weight(name);
  const embedded = embed(model, ids); // (T, d)
  const X = norm(model, embedded, T, d, w("ln.gain"), w("ln.bias")); // (T, d)
  const att = multiHeadAttention(model, "attention.", X, T, ids, removed && removed[0]);
  const readout = (S) => softcap(addBias(matmul(S, model.matrix("W_out"), S.length / d, d, model.vocabSize), w("b_out"), model.vocabSize), model.config.logit_softcap);
  const blocks = [{ input: embedded, ln1: X, attention: att.out, output: att.out }]; // no residual, no MLP
  return { logits: readout(att.out), attention: [att], stream: [X, att.out], readout, blocks, embedded };
}

/** ids (T,), T <= context_window -> the logits of every position and everything computed on the way.
 *  removed (optional): [layer] {head: null | mean}, the heads taken out (multiHeadAttention). */
function forward(model, ids, removed = null) {
  return model.config.kind === "seed" ? forwardSeed(model, ids, removed) : forwardGPT(model, ids, removed);
}

/** A head's context taken out: zeros (T, d_k), or its mean (d_k,) at every position. */
function ablated(mean, T, dK) {
  const out = new Float64Array(T * dK);
  if (mean) for (let t = 0; t < T; t++) out.set(mean, t * dK);
  return out;
}

/** Row t of a (T, N) tensor as its own vector. */
function row(A, t, N) {
  return A.subarray(t * N, (t + 1) * N);
}

/** The logit lens: for the last position, softmax(readout(stream_l)) for every point l of the stream.
 *  Entry 0 is the input of the first layer; the last entry is the model's own output distribution. */
function logitLens(model, result, T) {
  return result.stream.map((S) => {
    const logits = result.readout(S.subarray((T - 1) * model.d, T * model.d));
    return softmax(logits);
  });
}

/** A model from the page's JSON payload: config, vocabulary and the weights (base64, float32 or float16). */
function loadModel(payload) {
  const bytes = Uint8Array.from(atob(payload.weights.data), (c) => c.charCodeAt(0));
  const floats = payload.weights.dtype === "float16" ? halfToFloat(new Uint16Array(bytes.buffer)) : new Float32Array(bytes.buffer);
  const tensors = {};
  for (const [name, [offset, shape]] of Object.entries(payload.weights.index)) {
    tensors[name] = floats.subarray(offset, offset + shape.reduce((a, b) => a * b, 1));
  }
  const config = payload.config;
  const d = config.embedding_dim;
  const vocabSize = payload.vocab.length;
  const sinusoidal = config.positional === "sinusoidal";
  const scaleTokens = config.kind === "seed" ? config.embedding_scale : true;
  const model = {
    config,
    d,
    numHeads: config.num_heads,
    vocabSize,
    vocab: payload.vocab,
    weight: (name) => tensors[name], // undefined for a weight this model has not (a bias, W_O, ...)
    matrix: (name) => transposed[name], // W^T (N, K) of a projection W (K, N): what matmul takes
    positions: config.positional === "rope" ? null : sinusoidal ? sinusoidalEncoding(config.context_window, d) : tensors["embedding.position.weight"],
    embeddingScale: sinusoidal && scaleTokens ? Math.fround(Math.sqrt(d)) : 1,
  };
  const transposed = {};
  const keep = (name, WT, N, K) => { // W^T (N, K); in the kernel's memory too, once: every product with it reads it there
    transposed[name] = WT;
    if (KERNEL) KERNEL.keep(WT, N, K);
  };
  for (const [name, [, shape]] of Object.entries(payload.weights.index)) {
    if (/(^|\.)W_[A-Za-z0-9]+$/.test(name) && shape.length === 2) keep(name, transpose(tensors[name], shape[0], shape[1]), shape[1], shape[0]);
  }
  // logits = H W_vocab, with W_vocab = E^T when the head is tied to the embedding: then W_vocab^T = E
  if (config.kind !== "seed" && !transposed.W_vocab) keep("W_vocab", Float64Array.from(tensors["embedding.E"]), vocabSize, d);
  return model;
}

/** IEEE half-precision bits -> float32 values. */
function halfToFloat(bits) {
  const out = new Float32Array(bits.length);
  for (let i = 0; i < bits.length; i++) {
    const b = bits[i];
    const sign = b & 0x8000 ? -1 : 1;
    const exponent = (b >> 10) & 0x1f;
    const fraction = b & 0x3ff;
    if (exponent === 0) out[i] = sign * 2 ** -14 * (fraction / 1024);
    else if (exponent === 31) out[i] = fraction ? NaN : sign * Infinity;
    else out[i] = sign * 2 ** (exponent - 15) * (1 + fraction / 1024);
  }
  return out;
}
