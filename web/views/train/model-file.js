// The Train view's model as a file: the trained model as a transformer case document
// (docs/case-format.md: config, weights, the probe row and its logits), and such a document loaded
// back as the view's model, all or nothing.
import { HeadscopeError } from '../../lib/errors.js';
import { makeTask } from '../../lib/tasks.js';
import { caseLoss, parseCase } from '../../lib/case.js';
import { nested } from '../common/export-data.js';
import { applyTrainState, trainSetup } from './state.js';

/** The INVALID_ARGUMENT error of a call that needs the view's model before it has one. */
export const noModel = (where) => new HeadscopeError('INVALID_ARGUMENT', `${where}: the view has no model (it did not start)`);

/**
 * @param {object} t  the view's shared fields (view.js): state, model, task, probe, playing,
 *   generation, destroyed
 * @param {{ session: object, loaded: (name: string | undefined) => void }} o  session: session.js's;
 *   loaded: a model was loaded (its case's name), after it is the view's
 */
export function createModelFile(t, { session, loaded }) {
  // The case file's name carries what the config does not: the task, the seed and the step.
  const caseName = () => `headscope-train task=${t.state.task} seed=${t.state.seed} steps=${t.state.steps}`;

  /** The trained model as a transformer case document, the probe row's logits expected. */
  function exportModel() {
    return session.serial(async () => {
      if (!t.model) throw noModel('exportModel');
      const { model, probe } = t;
      const sd = await model.stateDict();
      const { logits } = await model.forward(probe.tokens);
      const cfg = trainSetup(t.state, t.task).model;
      return {
        kind: 'transformer',
        name: caseName(),
        config: { vocab_size: cfg.vocabSize, max_len: cfg.maxLen, d_model: cfg.dModel, n_layers: cfg.nLayers,
          n_heads: cfg.nHeads, n_kv_heads: cfg.nKvHeads, attn_window: cfg.attnWindow, d_mlp: cfg.dMlp, norm: cfg.norm,
          positions: cfg.positions,
          ...(cfg.positions === 'rope' ? { rope_layout: cfg.ropeLayout, rope_base: cfg.ropeBase, rope_fraction: cfg.ropeFraction } : {}),
          ...(cfg.attnSinks ? { attn_sinks: true } : {}),
          causal: true, act: 'gelu',
          bias: true, ln_eps: 1e-5 },
        state_dict: Object.fromEntries(Object.entries(sd).map(([k, v]) => [k, nested(v)])),
        inputs: { tokens: nested(probe.tokens), targets: nested(probe.targets) },
        expected: { logits: nested(logits), loss: caseLoss(logits.data, probe.targets.data, t.task.vocabSize) },
      };
    });
  }

  /**
   * Loads a transformer case document as the view's model: its config must be one the view can
   * set up (else a HeadscopeError names the field), its name gives the task, seed and step when
   * it was exported here (else the current task and seed, step 0). Training goes on from there
   * with a fresh optimizer. All or nothing: the new model is built and loaded beside the current
   * one, which stays (weights, step, optimizer state, settings and URL) when anything fails.
   */
  function loadModel(caseDocument) {
    return session.serial(async () => {
      const parsed = parseCase(caseDocument);
      if (parsed.kind !== 'transformer') throw new HeadscopeError('INVALID_ARGUMENT', 'loadModel: expected a "kind": "transformer" case');
      const cfg = parsed.config;
      const named = /task=([\w-]+) seed=(\d+) steps=(\d+)/.exec(parsed.name ?? '') ?? [];
      // The name's step is checked as a link's is (a step of 10^20 would be a run that never ends).
      const patch = { layers: cfg.nLayers, heads: cfg.nHeads, kvHeads: cfg.nKvHeads ?? cfg.nHeads, dModel: cfg.dModel,
        mlp: cfg.dMlp > 0, norm: cfg.norm, positions: cfg.positions, ropeLayout: cfg.ropeLayout, ropeBase: cfg.ropeBase,
        ropeFraction: cfg.ropeFraction, attnWindow: cfg.attnWindow, attnSinks: cfg.attnSinks, steps: named[3] ? Number(named[3]) : 0,
        ...(named[1] ? { task: named[1], seed: Number(named[2]) } : {}) };
      if (cfg.dMlp !== 0 && cfg.dMlp !== 4 * cfg.dModel) throw new HeadscopeError('INVALID_ARGUMENT', `loadModel: config.d_mlp: the Train view takes 0 or 4 d_model (${4 * cfg.dModel}), got ${cfg.dMlp}`);
      for (const [key, want, name = key] of [['causal', true], ['act', 'gelu'], ['bias', true], ['tieEmbeddings', false, 'tie_embeddings']]) {
        if (cfg[key] !== want) throw new HeadscopeError('INVALID_ARGUMENT', `loadModel: config.${name}: the Train view takes ${want}, got ${cfg[key]}`);
      }
      const next = applyTrainState(patch, t.state, 'loadModel: config');
      const nextTask = makeTask(next.task, { seed: next.seed });
      if (nextTask.vocabSize !== cfg.vocabSize || nextTask.seqLen !== cfg.maxLen) {
        throw new HeadscopeError('INVALID_ARGUMENT', `loadModel: config.vocab_size / max_len: ${cfg.vocabSize} / ${cfg.maxLen} ` +
          `do not fit the task ${next.task} (${nextTask.vocabSize} / ${nextTask.seqLen})`);
      }
      const built = await session.buildModel(next, Object.fromEntries(parsed.stateDict));
      if (t.destroyed) {
        await built.model.dispose();
        return;
      }
      t.playing = false;
      t.generation++;
      t.state = { ...next };
      await session.adopt(built, next.steps);
      loaded(parsed.name);
    });
  }

  return { exportModel, loadModel };
}
