// The circuits of src/model/circuits.py in the browser: what each head reads and writes, from the
// weights alone (Elhage et al. 2021, "A Mathematical Framework for Transformer Circuits").
//
// Every norm before a head or the readout is folded into the weights as TransformerLens folds it
// (src/model/circuits.py's docstring has every case): its gain multiplies the rows of the matrices that
// read from it (W_Q, W_K, W_V; W_U); with a LayerNorm (which subtracts the mean) what writes into the
// stream (W_E; the GPT's W_O) and what reads from it (W_Q, W_K, W_V) is centred over d_model; W_U is
// centred over the vocabulary unless the logits are soft-capped (a constant added to every logit
// changes no probability). The norm's division by the stream's spread is what cannot be folded: the
// circuits are the model with that scale left out, the approximation the paper makes too. With
// qk_norm each token's q and k are RMS-normalised one at a time (exact); value embeddings add E_V^h
// to W_E W_V^h; RoPE: query and key at offset 0.
//
//   W_E       (V, d)  E[c] as it enters the stream (scaled by sqrt(d) beside sinusoidal positions)
//   W_U       (d, V)  the readout: diag(gain_f) W_vocab (seed: W_out)
//   QK^h      = W_E W_Q^h (W_E W_K^h)^T / sqrt(d_head)     (V, V): rows the query's character, columns the key's
//   OV^h      = (W_E W_V^h + E_V^h) W_O^h W_U             (V, V): rows the attended character, columns the logit it raises
//   direct    = W_E W_U                                   (V, V): the path through no head (GPT only)
//   positivity(M) = sum_i lambda_i / sum_i |lambda_i|  over M's eigenvalues (a copying OV is near +1)
//   composition(A, B) = ||A B||_F / (||A||_F ||B||_F), A = OV of a head of layer l, B of a later head:
//                       Q: its W_Q W_K^T,  K: (W_Q W_K^T)^T,  V: its W_V W_O
//
// Matrices are flat Float64Arrays in row-major order, as in model.js; shapes in the comments.
"use strict";

/** A (n, k) times B (k, m) -> (n, m), in plain loops (the circuits' matrices are small: copying them into
 *  the kernel's memory would cost more than it saves). */
function mm(A, B, n, k, m) {
  const out = new Float64Array(n * m);
  for (let i = 0; i < n; i++)
    for (let j = 0; j < k; j++) {
      const a = A[i * k + j];
      if (a !== 0) for (let c = 0; c < m; c++) out[i * m + c] += a * B[j * m + c];
    }
  return out;
}

/** M (R, C) minus its mean along `axis`, in place, as numpy's M - M.mean(axis, keepdims=True): axis 0,
 * each column's mean over its R rows; axis 1, each row's mean over its C columns. */
function centre(M, R, C, axis) {
  const [lines, length, lineStep, step] = axis === 0 ? [C, R, 1, C] : [R, C, C, 1];
  for (let l = 0; l < lines; l++) {
    let mean = 0;
    for (let i = 0; i < length; i++) mean += M[l * lineStep + i * step];
    mean /= length;
    for (let i = 0; i < length; i++) M[l * lineStep + i * step] -= mean;
  }
  return M;
}

/** Columns c0 .. c0 + n - 1 of W (R, C), each row times gain[r] when given: (R, n). */
function columnBlock(W, R, C, c0, n, gain = null) {
  const out = new Float64Array(R * n);
  for (let r = 0; r < R; r++) for (let c = 0; c < n; c++) out[r * n + c] = W[r * C + c0 + c] * (gain ? gain[r] : 1);
  return out;
}

/** Rows r0 .. r0 + n - 1 of W (R, C): (n, C). */
function rowBlock(W, C, r0, n) {
  return Float64Array.from(W.subarray(r0 * C, (r0 + n) * C));
}

/** The folded weights: W_E (V, d), W_U (d, V), and per layer and head W_Q, W_K, W_V (d, d_head) and
 *  W_O (d_head, d). With GQA, query head h reads key/value head floor(h / (h/k)). */
function foldedWeights(model) {
  const { d, numHeads: H, vocabSize: V, config } = model;
  const seed = config.kind === "seed", L = seed ? 1 : config.num_layers, dK = d / H;
  const centred = config.norm !== "rms"; // LayerNorm subtracts the mean; RMSNorm does not
  const gains = (name) => (config.qk_norm ? model.weight(name) ?? new Float64Array(dK).fill(1) : null);
  const kv = config.num_kv_heads || H, dKV = kv * dK;
  const E = model.weight("embedding.E");
  const WE = Float64Array.from(E, (x) => x * model.embeddingScale); // (V, d)
  if (centred) centre(WE, V, d, 1);
  const finalGain = seed ? null : model.weight("ln_f.gain");
  const readout = seed ? model.weight("W_out") : model.weight("W_vocab") ?? transpose(E, V, d); // (d, V)
  const WU = columnBlock(readout, d, V, 0, V, finalGain);
  if (!config.logit_softcap) centre(WU, d, V, 1); // TransformerLens's center_unembed: softmax ignores a shift
  const layers = [];
  for (let l = 0; l < L; l++) {
    const p = seed ? "" : `blocks.${l}.`;
    const gain = model.weight(p + (seed ? "ln.gain" : "ln_1.gain")); // null without a gain
    const W = (name) => model.weight(p + "attention." + name);
    const heads = [];
    for (let h = 0; h < H; h++) {
      const shared = Math.floor(h / (H / kv));
      const read = (name, width, head) => { const M = columnBlock(W(name), d, width, head * dK, dK, gain); return centred ? centre(M, d, dK, 0) : M; };
      // without W_O (the notes' seed) head h's context is columns h d_head .. of the output: W_O^h = [0 I 0]
      const WO = W("W_O") ? rowBlock(W("W_O"), d, h * dK, dK) : placed(dK, d, h * dK);
      if (centred && !seed) centre(WO, dK, d, 1); // what the heads write, only LayerNorms read (seed: W_out reads it)
      const EV = model.weight(p + "E_V"); // (V, k d_head): value embeddings, or absent
      heads.push({
        WQ: read("W_Q", d, h), WK: read("W_K", dKV, shared), WV: read("W_V", dKV, shared), WO,
        EV: EV ? columnBlock(EV, V, dKV, shared * dK, dK) : null,
        qGain: gains(p + "attention.q_norm.gain"), kGain: gains(p + "attention.k_norm.gain"),
      });
    }
    layers.push(heads);
  }
  return { WE, WU, layers, V, d, dK, L, H, seed };
}

/** [0 I 0] (n, m): the identity in columns c0 .. c0 + n - 1. */
function placed(n, m, c0) {
  const P = new Float64Array(n * m);
  for (let i = 0; i < n; i++) P[i * m + c0 + i] = 1;
  return P;
}

/** The eigenvalues of a real (n, n) matrix, as [re, im] pairs: reduced to upper Hessenberg form by
 *  Householder reflections, then the shifted QR algorithm in complex arithmetic (Givens rotations,
 *  a Wilkinson shift from the trailing 2 x 2, deflation when a subdiagonal entry vanishes). */
function eigenvalues(A, n) {
  const re = Float64Array.from(A), im = new Float64Array(n * n);
  for (let k = 0; k < n - 2; k++) { // Householder: zero column k below the subdiagonal, H = P H P
    const v = new Float64Array(n - k - 1);
    let norm = 0;
    for (let i = 0; i < v.length; i++) norm += (v[i] = re[(k + 1 + i) * n + k]) ** 2;
    norm = Math.sqrt(norm);
    if (norm === 0) continue;
    v[0] += v[0] > 0 ? norm : -norm;
    const vv = v.reduce((s, x) => s + x * x, 0);
    for (let j = 0; j < n; j++) { // P H: rows k+1 ..
      let s = 0;
      for (let i = 0; i < v.length; i++) s += v[i] * re[(k + 1 + i) * n + j];
      for (let i = 0; i < v.length; i++) re[(k + 1 + i) * n + j] -= (2 * s * v[i]) / vv;
    }
    for (let i = 0; i < n; i++) { // (P H) P: columns k+1 ..
      let s = 0;
      for (let j = 0; j < v.length; j++) s += re[i * n + k + 1 + j] * v[j];
      for (let j = 0; j < v.length; j++) re[i * n + k + 1 + j] -= (2 * s * v[j]) / vv;
    }
  }
  const abs = (r, c) => Math.hypot(re[r * n + c], im[r * n + c]);
  const found = [];
  let hi = n - 1, iterations = 0;
  while (hi >= 0) {
    let lo = hi; // the active block lo..hi: its subdiagonal has no zero
    while (lo > 0 && abs(lo, lo - 1) > 1e-15 * (abs(lo, lo) + abs(lo - 1, lo - 1))) lo--;
    if (lo === hi) { // deflated: H[hi, hi] is an eigenvalue
      found.push([re[hi * n + hi], im[hi * n + hi]]);
      hi--;
      iterations = 0;
      continue;
    }
    // Wilkinson shift: the eigenvalue of [[a, b], [c, e]] nearer e; every 11th try an exceptional one
    const at = (r, c) => [re[r * n + c], im[r * n + c]];
    const [a, b, c, e] = [at(hi - 1, hi - 1), at(hi - 1, hi), at(hi, hi - 1), at(hi, hi)];
    let mu;
    if (++iterations % 11 === 0) mu = [e[0] + abs(hi, hi - 1), e[1]];
    else {
      const half = [(a[0] - e[0]) / 2, (a[1] - e[1]) / 2];
      const bc = cmul(b, c);
      const root = csqrt([half[0] * half[0] - half[1] * half[1] + bc[0], 2 * half[0] * half[1] + bc[1]]);
      const mid = [(a[0] + e[0]) / 2, (a[1] + e[1]) / 2];
      const [m1, m2] = [[mid[0] + root[0], mid[1] + root[1]], [mid[0] - root[0], mid[1] - root[1]]];
      mu = Math.hypot(m1[0] - e[0], m1[1] - e[1]) < Math.hypot(m2[0] - e[0], m2[1] - e[1]) ? m1 : m2;
    }
    for (let i = lo; i <= hi; i++) { re[i * n + i] -= mu[0]; im[i * n + i] -= mu[1]; }
    const cs = new Float64Array(4 * (hi - lo)); // rotation k: c = (cr, ci), s = (sr, si), c = x / r, s = y / r
    for (let k = lo; k < hi; k++) { // H - mu I = Q R: rotation k zeroes H[k+1, k]
      const [xr, xi, yr, yi] = [re[k * n + k], im[k * n + k], re[(k + 1) * n + k], im[(k + 1) * n + k]];
      const r = Math.hypot(xr, xi, yr, yi);
      const [cr, ci, sr, si] = r === 0 ? [1, 0, 0, 0] : [xr / r, xi / r, yr / r, yi / r];
      cs.set([cr, ci, sr, si], 4 * (k - lo));
      for (let j = k; j <= hi; j++) { // rows k, k+1 <- [[conj c, conj s], [-s, c]] [p; q]
        const a = k * n + j, b = a + n, pr = re[a], pi = im[a], qr = re[b], qi = im[b];
        re[a] = cr * pr + ci * pi + sr * qr + si * qi;
        im[a] = cr * pi - ci * pr + sr * qi - si * qr;
        re[b] = cr * qr - ci * qi - sr * pr + si * pi;
        im[b] = cr * qi + ci * qr - sr * pi - si * pr;
      }
    }
    for (let k = lo; k < hi; k++) { // R Q: columns k, k+1 <- [p, q] [[c, -conj s], [s, conj c]]
      const [cr, ci, sr, si] = cs.subarray(4 * (k - lo), 4 * (k - lo) + 4);
      for (let i = lo; i <= Math.min(k + 2, hi); i++) {
        const a = i * n + k, b = a + 1, pr = re[a], pi = im[a], qr = re[b], qi = im[b];
        re[a] = pr * cr - pi * ci + qr * sr - qi * si;
        im[a] = pr * ci + pi * cr + qr * si + qi * sr;
        re[b] = qr * cr + qi * ci - pr * sr - pi * si;
        im[b] = qi * cr - qr * ci - pi * sr + pr * si;
      }
    }
    for (let i = lo; i <= hi; i++) { re[i * n + i] += mu[0]; im[i * n + i] += mu[1]; }
  }
  return found;
}

const cmul = (a, b) => [a[0] * b[0] - a[1] * b[1], a[0] * b[1] + a[1] * b[0]];
function csqrt([x, y]) {
  const r = Math.hypot(x, y), s = Math.sqrt((r + Math.abs(x)) / 2);
  if (s === 0) return [0, 0];
  return x >= 0 ? [s, y / (2 * s)] : [Math.abs(y) / (2 * s), y >= 0 ? s : -s];
}

/** sum lambda / sum |lambda| over the eigenvalues of M = A B (A (n, r), B (r, n)): those of B A (r, r),
 *  the same nonzero ones, from an r x r matrix instead of an n x n one. */
function positivity(BA, r) {
  const values = eigenvalues(BA, r);
  const sum = values.reduce((s, [x]) => s + x, 0), size = values.reduce((s, [x, y]) => s + Math.hypot(x, y), 0);
  return size === 0 ? 0 : sum / size;
}

/** Every circuit of the model: per layer and head the QK and OV maps (V, V) and their positivity, the
 *  direct path (V, V) where a residual stream carries the embedding to the readout (GPT), and the
 *  composition scores {q, k, v}: [l1][h1][l2][h2], 0 unless l1 < l2. */
function circuits(model) {
  const F = foldedWeights(model), { WE, WU, V, d, dK } = F;
  const root = Math.sqrt(dK);
  const qk = [], ov = [], positive = { qk: [], ov: [] };
  for (const heads of F.layers) {
    const row = { qk: [], ov: [], pqk: [], pov: [] };
    for (const { WQ, WK, WV, WO, EV, qGain, kGain } of heads) {
      let q = mm(WE, WQ, V, d, dK), k = mm(WE, WK, V, d, dK); // (V, d_head) each
      if (qGain) [q, k] = [rmsNorm(q, V, dK, qGain), rmsNorm(k, V, dK, kGain)]; // qk_norm: each token's own
      q = q.map((x) => x / root);
      row.qk.push(matmul(q, k, V, dK, V)); // q k^T: (V, V)
      row.pqk.push(positivity(mm(transpose(k, V, dK), q, dK, V, dK), dK)); // k^T q: (d_head, d_head)
      const v = mm(WE, WV, V, d, dK), out = mm(WO, WU, dK, d, V); // (V, d_head), (d_head, V)
      if (EV) for (let i = 0; i < v.length; i++) v[i] += EV[i]; // + E_V^h: the token's own value
      row.ov.push(mm(v, out, V, dK, V));
      row.pov.push(positivity(mm(out, v, dK, V, dK), dK));
    }
    qk.push(row.qk); ov.push(row.ov); positive.qk.push(row.pqk); positive.ov.push(row.pov);
  }
  return { qk, ov, positivity: positive, direct: F.seed ? null : mm(WE, WU, V, d, V), composition: composition(F), V };
}

/** The Q-, K- and V-composition of every head pair, ||A B C D||_F / (||A B||_F ||C D||_F), with the
 *  earlier head's OV = A B (A = W_V (d, d_head), B = W_O (d_head, d)) and the later head's C D
 *  (d, d_head)(d_head, d). Never a d x d product: with G_A = A^T A, M = B C and G_D = D D^T (d_head
 *  square each), ||A M D||_F^2 = tr(M^T G_A M G_D), ||A B||_F^2 = tr(G_A B B^T), ||C D||_F^2 = tr(C^T C G_D). */
function composition(F) {
  const { L, H, d, dK, layers } = F;
  const gram = (X, n, m) => mm(transpose(X, n, m), X, m, n, m); // X^T X: (m, m)
  const trace = (A, B) => { let s = 0; for (let i = 0; i < dK; i++) for (let j = 0; j < dK; j++) s += A[i * dK + j] * B[j * dK + i]; return s; };
  const scaled = (W, gain) => (gain ? W.map((x, i) => x * gain[i % dK]) : W); // qk_norm's gains, its scale taken as constant
  const parts = layers.map((heads) => heads.map(({ WQ: Q, WK: K, WV, WO, qGain, kGain }) => {
    const outT = transpose(WO, dK, d); // W_O^T (d, d_head)
    const [WQ, WK] = [scaled(Q, qGain), scaled(K, kGain)];
    // as the later one, C and D^T (d, d_head) for each kind: Q: W_Q W_K^T, K: W_K W_Q^T, V: W_V W_O
    const later = (C, Dt) => ({ C, GC: gram(C, d, dK), GD: gram(Dt, d, dK) });
    return {
      GA: gram(WV, d, dK), BBt: gram(outT, d, dK), // the head as the earlier one: A = W_V, B = W_O
      q: later(WQ, WK), k: later(WK, WQ), v: later(WV, outT),
    };
  }));
  // B C of every pair of a layer's heads at once: the earlier layer's W_O stacked, (H d_head, d), times
  // the later layer's C side by side, (d, H d_head): one (d, d) product, in the kernel, per layer pair
  const stacked = (blocks) => { const S = new Float64Array(H * dK * d); blocks.forEach((X, h) => S.set(X, h * dK * d)); return S; }; // H (d_head, d) -> (H d_head, d)
  const stackedO = layers.map((heads) => stacked(heads.map(({ WO }) => WO)));
  const scores = {};
  for (const kind of ["q", "k", "v"]) {
    scores[kind] = Array.from({ length: L }, () => Array.from({ length: H }, () => Array.from({ length: L }, () => new Array(H).fill(0))));
    for (let l2 = 1; l2 < L; l2++) {
      const CT = stacked(parts[l2].map((head) => transpose(head[kind].C, d, dK))); // (H d_head, d): each head's C^T
      for (let l1 = 0; l1 < l2; l1++) {
        const BC = matmul(stackedO[l1], CT, H * dK, d, H * dK); // (H d_head, H d_head): block (h1, h2) = B^h1 C^h2
        for (let h1 = 0; h1 < H; h1++)
          for (let h2 = 0; h2 < H; h2++) {
            const a = parts[l1][h1], { GC, GD } = parts[l2][h2][kind];
            const M = new Float64Array(dK * dK); // B C of this pair: (d_head, d_head)
            for (let i = 0; i < dK; i++) M.set(BC.subarray((h1 * dK + i) * H * dK + h2 * dK, (h1 * dK + i) * H * dK + (h2 + 1) * dK), i * dK);
            const both = trace(mm(mm(transpose(M, dK, dK), a.GA, dK, dK, dK), M, dK, dK, dK), GD); // tr(M^T G_A M G_D)
            scores[kind][l1][h1][l2][h2] = Math.sqrt(Math.max(0, both) / (trace(a.GA, a.BBt) * trace(GC, GD)));
          }
      }
    }
  }
  return scores;
}

/** log p(b | a) of the text's bigrams, add-one smoothed: (V, V), rows the character a, columns the next b. */
function bigramLogProbs(ids, V) {
  const counts = new Float64Array(V * V).fill(1);
  for (let t = 0; t + 1 < ids.length; t++) counts[ids[t] * V + ids[t + 1]]++;
  for (let a = 0; a < V; a++) {
    let total = 0;
    for (let b = 0; b < V; b++) total += counts[a * V + b];
    for (let b = 0; b < V; b++) counts[a * V + b] = Math.log(counts[a * V + b] / total);
  }
  return counts;
}

/** Pearson's correlation of two equally long arrays (circuits.py's correlation). */
function correlation(x, y) {
  const n = x.length, mx = x.reduce((s, v) => s + v, 0) / n, my = y.reduce((s, v) => s + v, 0) / n;
  let sxy = 0, sxx = 0, syy = 0;
  for (let i = 0; i < n; i++) { sxy += (x[i] - mx) * (y[i] - my); sxx += (x[i] - mx) ** 2; syy += (y[i] - my) ** 2; }
  return sxy / Math.sqrt(sxx * syy);
}
