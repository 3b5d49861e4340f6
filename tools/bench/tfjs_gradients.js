// The gradients the benchmark's tfjs training row ('tfjs-train', train.js) needs, for
// @tensorflow/tfjs-core 4.22 used on its own.
//
// tfjs-core's bundles (tf-core.node.js for Node, tf-core.min.js for the page) register no
// gradient: its gradient configs ship only as unbundled ES modules (dist/gradients/*.js, imported
// by dist/register_all_gradients.js with extensionless specifiers, which neither Node nor a browser
// resolves without a bundler), and the @tensorflow/tfjs union package, which registers them, is not
// a dependency here. Without them tf.grad / optimizer.minimize throw "gradient function not found
// for Sum".
//
// So the configs of the kernels the model's forward puts on the tape are copied here from
// tfjs-core 4.22's dist/gradients/<Kernel>_grad.js, op for op, written against the public `tf`
// namespace (tf.broadcast_util, tf.backend_util, tf.util, tf.slice_util are the modules those
// files import). They are registered only for kernels that have no gradient yet, so a program that
// also loads tfjs's own registry (e.g. through @tensorflow/tfjs) keeps tfjs's. fused.matMul
// (_FusedMatMul) and logSoftmax bring their own gradients (tf.customGrad) and need none here.
// The copies were checked against tfjs's own files loaded directly (gradients equal to the bit on
// the training model) and, through the training row's losses, against PyTorch.

/** Registers the gradient configs below that `tf` does not have yet; returns the kernels registered. */
export function registerTfjsGradients(tf) {
  const bu = tf.broadcast_util;
  // dy summed over the axes that broadcasting added to `shape` (then reshaped back, as tfjs does).
  const sumTo = (res, shape, outShape) => {
    const axes = bu.getReductionAxes(shape, outShape);
    return axes.length > 0 ? tf.sum(res, axes) : res;
  };
  const reduceTo = (res, shape, outShape) => {
    const axes = bu.getReductionAxes(shape, outShape);
    return axes.length > 0 ? tf.reshape(tf.sum(res, axes), shape) : res;
  };
  const configs = [
    { kernelName: 'Add', inputsToSave: ['a', 'b'], gradFunc: (dy, [a, b]) => {
      const outShape = bu.assertAndGetBroadcastShape(a.shape, b.shape);
      return { a: () => tf.reshape(sumTo(dy, a.shape, outShape), a.shape), b: () => tf.reshape(sumTo(dy, b.shape, outShape), b.shape) };
    } },
    { kernelName: 'Sub', inputsToSave: ['a', 'b'], gradFunc: (dy, [a, b]) => {
      const outShape = bu.assertAndGetBroadcastShape(a.shape, b.shape);
      return { a: () => tf.reshape(sumTo(dy, a.shape, outShape), a.shape), b: () => tf.reshape(tf.neg(sumTo(dy, b.shape, outShape)), b.shape) };
    } },
    { kernelName: 'Multiply', inputsToSave: ['a', 'b'], gradFunc: (dy, [a, b]) => {
      const outShape = bu.assertAndGetBroadcastShape(a.shape, b.shape);
      return {
        a: () => reduceTo(tf.mul(dy, tf.cast(b, 'float32')), a.shape, outShape),
        b: () => reduceTo(tf.mul(dy, tf.cast(a, 'float32')), b.shape, outShape),
      };
    } },
    { kernelName: 'RealDiv', inputsToSave: ['a', 'b'], gradFunc: (dy, [a, b]) => {
      const outShape = bu.assertAndGetBroadcastShape(a.shape, b.shape);
      return {
        a: () => reduceTo(tf.div(dy, tf.cast(b, 'float32')), a.shape, outShape),
        b: () => tf.neg(tf.div(reduceTo(tf.mul(dy, tf.cast(a, 'float32')), b.shape, outShape), tf.cast(tf.square(b), 'float32'))),
      };
    } },
    { kernelName: 'BatchMatMul', inputsToSave: ['a', 'b'], gradFunc: (dy, [a, b], { transposeA, transposeB }) => {
      if (!transposeA && !transposeB) return { a: () => tf.matMul(dy, b, false, true), b: () => tf.matMul(a, dy, true, false) };
      if (!transposeA && transposeB) return { a: () => tf.matMul(dy, b, false, false), b: () => tf.matMul(dy, a, true, false) };
      if (transposeA && !transposeB) return { a: () => tf.matMul(b, dy, false, true), b: () => tf.matMul(a, dy, false, false) };
      return { a: () => tf.matMul(b, dy, true, true), b: () => tf.matMul(dy, a, true, true) };
    } },
    { kernelName: 'Reshape', inputsToSave: ['x'], gradFunc: (dy, [x]) => ({ x: () => tf.reshape(dy, x.shape) }) },
    { kernelName: 'Transpose', gradFunc: (dy, saved, { perm }) => {
      const undo = tf.backend_util.getUndoAxesPermutation(perm);
      return { x: () => tf.transpose(dy, undo) };
    } },
    { kernelName: 'SplitV', gradFunc: (dy, saved, { axis }) => ({ x: () => tf.concat(dy, axis) }) },
    { kernelName: 'Slice', inputsToSave: ['x'], gradFunc: (dy, [x], { begin, size }) => {
      const [begin_, size_] = tf.slice_util.parseSliceParams(x, begin, size);
      const paddings = [];
      for (let i = 0; i < dy.rank; i++) paddings.push([begin_[i], x.shape[i] - begin_[i] - size_[i]]);
      return { x: () => tf.pad(dy, paddings) };
    } },
    { kernelName: 'Sum', inputsToSave: ['x'], gradFunc: (dy, [x], { axis }) => {
      const expanded = x.shape.slice();
      for (const a of tf.util.parseAxisParam(axis, x.shape)) expanded[a] = 1;
      const derX = tf.mul(tf.reshape(dy, expanded), tf.ones(x.shape, 'float32'));
      return { x: () => derX };
    } },
    { kernelName: 'Mean', inputsToSave: ['x'], gradFunc: (dy, [x], { axis }) => {
      const axes = tf.util.parseAxisParam(axis, x.shape);
      const reduceSize = tf.util.sizeFromShape(tf.backend_util.computeOutAndReduceShapes(x.shape, axes)[1]);
      return { x: () => {
        const expanded = x.shape.slice();
        for (const a of axes) expanded[a] = 1;
        return tf.div(tf.mul(tf.reshape(dy, expanded), tf.ones(x.shape, 'float32')), reduceSize);
      } };
    } },
    { kernelName: 'Square', inputsToSave: ['x'], gradFunc: (dy, [x]) => ({ x: () => tf.mul(dy, tf.mul(tf.cast(x, 'float32'), 2)) }) },
    { kernelName: 'Rsqrt', inputsToSave: ['x'], gradFunc: (dy, [x]) => ({ x: () => tf.neg(tf.div(dy, tf.mul(tf.pow(x, 1.5), 2))) }) },
    { kernelName: 'Erf', inputsToSave: ['x'], gradFunc: (dy, [x]) => {
      const a = tf.mul(tf.exp(tf.neg(tf.square(x))), 2 / Math.sqrt(Math.PI));
      return { x: () => tf.mul(dy, a) };
    } },
    { kernelName: 'Softmax', outputsToSave: [true], gradFunc: (dy, [y], { dim }) => {
      const dyTimesY = tf.mul(dy, y);
      return { logits: () => tf.sub(dyTimesY, tf.mul(tf.sum(dyTimesY, [dim], true), y)) };
    } },
    { kernelName: 'Neg', gradFunc: (dy) => ({ x: () => tf.neg(dy) }) },
    { kernelName: 'Cast', gradFunc: (dy) => ({ x: () => dy.clone() }) },
    { kernelName: 'Identity', gradFunc: (dy) => ({ x: () => tf.cast(dy, 'float32') }) },
  ];
  const registered = [];
  for (const config of configs) {
    if (tf.getGradient(config.kernelName)) continue;
    tf.registerGradient(config);
    registered.push(config.kernelName);
  }
  return registered;
}
