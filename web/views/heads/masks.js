// The Heads view's masks: forward's attnMask and keyPaddingMask as boolean tensors.

/** Boolean (L, S) causal mask for forward's attnMask: true above the diagonal (key after query). */
export function causalMask(L, S = L) {
  const data = new Uint8Array(L * S);
  for (let i = 0; i < L; i++) for (let j = i + 1; j < S; j++) data[i * S + j] = 1;
  return { data, shape: [L, S] };
}

/** Boolean (S) key padding mask for an unbatched forward: true for the padded key positions. */
export function keyPaddingMask(S, padded) {
  const data = new Uint8Array(S);
  for (const j of padded) if (j >= 0 && j < S) data[j] = 1;
  return { data, shape: [S] };
}
