// The sums of a matrix product in WebAssembly SIMD: the fast path of model.js's `matmul`.
//
// A keystroke runs the whole forward pass again (the window slides, so every position changes),
// and its products are most of the time: in plain JavaScript V8 sums about 1.3 billion
// products a second, here about 5 (two float64 lanes at a time; BENCHMARKS.md, "Explorer page").
// The numbers are the same float64 sums as model.js's `matmulScalar`, added in another order
// (within 1e-12 of it; tests/explorer/test_kernel.py), and the forward pass stays in model.js: this
// file only adds up products. A browser without WebAssembly SIMD (or a page whose policy refuses
// WebAssembly) gets `KERNEL = null` and the JavaScript loops.
//
// The module is written here byte by byte (no compiler: the page is one file, the repository has
// no build step). Its one function, in WebAssembly's text format:
//
//   (func $columns (param $x $w $out $rows $stride $outStride i32)
//     ;; out[t, n..n+3] = sum_k X[t, k] W^T[n..n+3, k] for every row t: four rows of W^T at $w,
//     ;; $rows rows of X at $x (an even number), each row $stride bytes, out's rows $outStride apart.
//     for each pair of rows (a, b) of X:
//       acc_a[0..3] = acc_b[0..3] = (0, 0)             ;; eight f64x2 sums: lanes hold even and odd k
//       for k = 0, 2, 4, ... < K:
//         x_a = X[a, k:k+2]; x_b = X[b, k:k+2]           ;; v128.load
//         for j in 0..3: w = W^T[n+j, k:k+2]; acc_a[j] += x_a * w; acc_b[j] += x_b * w   ;; f64x2.mul, f64x2.add
//       out[a, n+j] = acc_a[j].lane0 + acc_a[j].lane1; out[b, n+j] likewise   ;; f64.store
//
// Operands live in the module's memory with rows padded by zeros to an even K, an even number of
// rows and a multiple of four columns. Weights are copied there once (`keep`); activations are
// copied in and the product out at each call: a few microseconds against the product's milliseconds.
"use strict";

/** The module's bytes: see the text above for what its function does. */
function kernelBytes() {
  const uleb = (n) => { const out = []; do { let b = n & 0x7f; n >>>= 7; if (n) b |= 0x80; out.push(b); } while (n); return out; };
  const vec = (items) => [...uleb(items.length), ...items.flat()];
  const section = (id, bytes) => [id, ...uleb(bytes.length), ...bytes];
  const name = (s) => vec([...s].map((c) => [c.charCodeAt(0)]));
  const [I32, V128] = [0x7f, 0x7b];
  const get = (i) => [0x20, i], set = (i) => [0x21, i];
  const [ADD, MUL, GE_U, LT_U] = [[0x6a], [0x6c], [0x4f], [0x49]];
  const simd = (op) => [0xfd, ...uleb(op)];
  const LOAD = [...simd(0x00), 4, 0]; // v128.load, aligned to 16 bytes, offset 0
  const ZERO = [...simd(0x0c), ...new Array(16).fill(0)]; // v128.const 0
  const [F64X2_ADD, F64X2_MUL] = [simd(0xf0), simd(0xf2)];
  const lane = (i) => [...simd(0x21), i]; // f64x2.extract_lane
  const store = (offset) => [0x39, 3, ...uleb(offset)]; // f64.store, aligned to 8 bytes
  const [BLOCK, LOOP, END, BR, BR_IF] = [[0x02, 0x40], [0x03, 0x40], [0x0b], [0x0c], [0x0d]];
  // locals: the six parameters, nine i32 and eleven v128
  const [x, w, out, rows, stride, outStride] = [0, 1, 2, 3, 4, 5];
  const [w1, w2, w3, xa, xEnd, k, xb, outA, outB] = [6, 7, 8, 9, 10, 11, 12, 13, 14];
  const acc = [15, 16, 17, 18, 19, 20, 21, 22], [va, vb, vw] = [23, 24, 25];
  const wRows = [w, w1, w2, w3];
  const sumLanes = (into, j) => [...get(into), ...get(acc[j]), ...lane(0), ...get(acc[j]), ...lane(1), 0xa0, ...store(8 * (j % 4))];
  const body = [
    ...get(w), ...get(stride), ...ADD, ...set(w1),
    ...get(w1), ...get(stride), ...ADD, ...set(w2),
    ...get(w2), ...get(stride), ...ADD, ...set(w3),
    ...get(x), ...set(xa), ...get(out), ...set(outA),
    ...get(x), ...get(rows), ...get(stride), ...MUL, ...ADD, ...set(xEnd),
    ...BLOCK, ...LOOP, // each pair of rows
    ...get(xa), ...get(xEnd), ...GE_U, ...BR_IF, 1,
    ...get(xa), ...get(stride), ...ADD, ...set(xb),
    ...get(outA), ...get(outStride), ...ADD, ...set(outB),
    ...acc.flatMap((i) => [...ZERO, ...set(i)]),
    0x41, 0, ...set(k), // k = 0 (a byte offset into the rows)
    ...LOOP, // each pair of k
    ...get(xa), ...get(k), ...ADD, ...LOAD, ...set(va),
    ...get(xb), ...get(k), ...ADD, ...LOAD, ...set(vb),
    ...wRows.flatMap((wj, j) => [
      ...get(wj), ...get(k), ...ADD, ...LOAD, ...set(vw),
      ...get(acc[j]), ...get(va), ...get(vw), ...F64X2_MUL, ...F64X2_ADD, ...set(acc[j]),
      ...get(acc[4 + j]), ...get(vb), ...get(vw), ...F64X2_MUL, ...F64X2_ADD, ...set(acc[4 + j]),
    ]),
    ...get(k), 0x41, 16, ...ADD, ...set(k),
    ...get(k), ...get(stride), ...LT_U, ...BR_IF, 0,
    ...END,
    ...[0, 1, 2, 3].flatMap((j) => sumLanes(outA, j)),
    ...[4, 5, 6, 7].flatMap((j) => sumLanes(outB, j)),
    ...get(xb), ...get(stride), ...ADD, ...set(xa),
    ...get(outB), ...get(outStride), ...ADD, ...set(outA),
    ...BR, 0,
    ...END, ...END, ...END,
  ];
  const func = [0x02, 9, I32, 11, V128, ...body];
  return new Uint8Array([
    0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00, // "\0asm", version 1
    ...section(1, vec([[0x60, ...vec(new Array(6).fill([I32])), 0]])), // type: six i32 -> nothing
    ...section(2, vec([[...name("env"), ...name("memory"), 0x02, 0x00, 0x01]])), // imports the memory
    ...section(3, vec([[0]])), // one function of that type
    ...section(7, vec([[...name("columns"), 0x00, 0]])), // exported as "columns"
    ...section(10, vec([[...uleb(func.length), ...func]])),
  ]);
}

/** { matmul(X, WT, T, K, N), keep(WT, N, K) } on the module above, or null where it cannot run. */
const KERNEL = (() => {
  let columns, memory;
  try {
    const bytes = kernelBytes();
    if (!WebAssembly.validate(bytes)) return null; // no SIMD in this browser
    memory = new WebAssembly.Memory({ initial: 16 });
    columns = new WebAssembly.Instance(new WebAssembly.Module(bytes), { env: { memory } }).exports.columns;
  } catch {
    return null; // no WebAssembly, or a policy that refuses it
  }
  const kept = new WeakMap(); // a weight's W^T -> its float64 offset in memory
  let keptEnd = 0; // kept weights fill memory from 0; each call's operands come after them
  const even = (n) => n + (n % 2), four = (n) => n + ((4 - (n % 4)) % 4);

  /** Room for `count` float64s from `offset`: memory grows (which detaches earlier views of it). */
  const room = (offset, count) => {
    const bytes = (offset + count) * 8 - memory.buffer.byteLength;
    if (bytes > 0) memory.grow(Math.ceil(bytes / 65536));
    return new Float64Array(memory.buffer);
  };
  /** A (rows, cols) in memory at `offset` as (padRows, padCols), the padding zeros. */
  const place = (f, offset, A, rows, cols, padRows, padCols) => {
    if (padCols === cols) f.set(A, offset); // one copy when the rows need no padding
    else {
      for (let r = 0; r < rows; r++) {
        f.set(A.subarray(r * cols, (r + 1) * cols), offset + r * padCols);
        f.fill(0, offset + r * padCols + cols, offset + (r + 1) * padCols);
      }
    }
    f.fill(0, offset + rows * padCols, offset + padRows * padCols);
  };
  return {
    /** Copy a weight's W^T (N, K) into memory once: every product with it reads it there. */
    keep(WT, N, K) {
      const f = room(keptEnd, four(N) * even(K));
      place(f, keptEnd, WT, N, K, four(N), even(K));
      kept.set(WT, keptEnd);
      keptEnd += four(N) * even(K);
    },
    /** out = X W (T, N) from X (T, K) and W^T (N, K), the sums in WebAssembly. */
    matmul(X, WT, T, K, N) {
      const [Tp, Kp, Np] = [even(T), even(K), four(N)];
      const keptAt = kept.get(WT); // else W^T goes first in the room after the kept weights
      const w = keptAt ?? keptEnd, x = keptAt === undefined ? keptEnd + Np * Kp : keptEnd, o = x + Tp * Kp;
      const f = room(o, Tp * Np);
      if (keptAt === undefined) place(f, w, WT, N, K, Np, Kp);
      place(f, x, X, T, K, Tp, Kp);
      for (let n = 0; n < Np; n += 4) columns(x * 8, (w + n * Kp) * 8, (o + n) * 8, Tp, Kp * 8, Np * 8);
      if (Np === N) return f.slice(o, o + T * N);
      const out = new Float64Array(T * N);
      for (let t = 0; t < T; t++) out.set(f.subarray(o + t * Np, o + t * Np + N), t * N);
      return out;
    },
  };
})();
