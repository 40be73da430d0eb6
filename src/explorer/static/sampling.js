// Choosing the next character, as src/model/generation.py does: temperature, then top-k, then top-p.
"use strict";

// Below float32's smallest normal number a temperature is greedy, as 0 is (src/model/generation.py's GREEDY_BELOW).
const GREEDY_BELOW = 1.1754943508222875e-38;

/** Last-position logits (vocab,) -> probabilities after temperature, top-k and top-p (nucleus).
 *  temperature 0 (or below GREEDY_BELOW) means greedy: all the mass on the most likely character. */
function nextTokenDistribution(logits, temperature = 1, topK = null, topP = null) {
  const V = logits.length;
  if (temperature < GREEDY_BELOW) {
    const greedy = new Float64Array(V);
    greedy[argmax(logits)] = 1;
    return greedy;
  }
  const top = Math.max(...logits);
  let z = Float64Array.from(logits, (l) => (l - top) / temperature); // (logits - max) / temperature: never +inf
  if (topK !== null && topK < V) {
    const kthLargest = [...z].sort((a, b) => b - a)[topK - 1];
    z = z.map((l) => (l < kthLargest ? -Infinity : l)); // ties with the k-th are kept, as torch.topk's masking keeps them
  }
  let probs = softmax(z);
  if (topP !== null && topP < 1) {
    // Nucleus: keep the most likely characters until their mass reaches top_p (at least one).
    const order = [...probs.keys()].sort((a, b) => probs[b] - probs[a]);
    const kept = new Float64Array(V);
    let massBefore = 0;
    for (const i of order) {
      if (massBefore < topP) kept[i] = probs[i];
      massBefore += probs[i];
    }
    const total = kept.reduce((a, b) => a + b, 0);
    probs = kept.map((p) => p / total);
  }
  return probs;
}

function argmax(values) {
  let best = 0;
  for (let i = 1; i < values.length; i++) if (values[i] > values[best]) best = i;
  return best;
}

/** One index drawn with probability probs[i] (inverse CDF over a uniform draw). */
function sampleFrom(probs, random = Math.random) {
  let u = random();
  for (let i = 0; i < probs.length; i++) {
    u -= probs[i];
    if (u < 0) return i;
  }
  return argmax(probs); // rounding left a sliver: the most likely character
}
