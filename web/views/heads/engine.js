// The Heads view's engine cache: headscope objects per slot, reloaded only when the config or
// weights change. Works with init()'s API (synchronous methods) and initWorker()'s (promises).

export class Engine {
  constructor(hs) {
    this.hs = hs;
    this.slots = new Map();  // slot -> { key, mha, stateDict }
  }

  async module(slot, config, stateDict) {
    const key = JSON.stringify(config);
    let s = this.slots.get(slot);
    if (s === undefined || s.key !== key) {
      if (s) await s.mha.dispose();
      this.slots.delete(slot);
      s = { key, mha: await this.hs.createMultiheadAttention(config), stateDict: null };
      this.slots.set(slot, s);
    }
    if (s.stateDict !== stateDict) {
      s.stateDict = null;
      await s.mha.loadStateDict(stateDict);
      s.stateDict = stateDict;
    }
    return s.mha;
  }

  /**
   * trace() of the layer and forward() of the same module with `headGates` (0 for a switched-off
   * head, which is its out_proj columns zeroed; null: every head on): every head's weights and
   * statistics (trace with headStats: the entropy, distance and max weight the cards show), the
   * output both ways, PyTorch's average (gates do not change the weights, nor their statistics);
   * needAverage false and no gate: no second pass, average null.
   * Through the page's worker, options go over as a structured clone and the trace's tensors,
   * headStats' included, come back transferred (web/lib/worker.js).
   */
  async run({ config, stateDict, headGates = null, needAverage = true, query, key, value, options, trace = null }) {
    const mha = await this.module('full', config, stateDict);
    const full = trace ?? await mha.trace(query, key, value, { ...options, headStats: true });
    // With every head on, the output is the trace's; the second pass is needed only for switched-
    // off heads or for PyTorch's averaged weights (the averaged view): half the work of an edit.
    if (headGates === null && !needAverage) return { trace: full, ablatedOutput: full.output, average: null };
    const averaged = await mha.forward(query, key, value,
      { ...options, headGates, needWeights: true, averageAttnWeights: true });
    return { trace: full, ablatedOutput: averaged.output, average: averaged.weights };
  }

  async dispose() {
    const slots = [...this.slots.values()];
    this.slots.clear();
    for (const s of slots) await s.mha.dispose();
  }
}
