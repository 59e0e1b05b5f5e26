// The bench workloads written with TF.js ops (NHWC), weights named as torch's state_dict.
// The wasm backend registers no Conv2DBackpropFilter and no UnsortedSegmentSum (the
// gradient of gather), so those two gradients are supplied here with kernels it has.
"use strict";

const tfjsModels = (() => {
  const dense = (x, w, b) => tf.add(tf.matMul(x, w), b);

  // conv2d (stride 1, 'valid') whose filter gradient is itself a valid conv:
  // dW[kh,kw,ci,co] = sum_{n,h,w} x[n,h+kh,w+kw,ci] * dy[n,h,w,co].
  const conv2dValid = tf.customGrad((x, w, save) => {
    save([x, w]);
    return {
      value: tf.conv2d(x, w, 1, "valid"),
      gradFunc: (dy, [xs, ws]) => [
        tf.conv2dTranspose(dy, ws, xs.shape, 1, "valid"),
        tf.transpose(tf.conv2d(tf.transpose(xs, [3, 1, 2, 0]), tf.transpose(dy, [1, 2, 0, 3]), 1, "valid"), [1, 2, 0, 3]),
      ],
    };
  });

  // embedding lookup whose gradient scatters (and sums duplicate ids) with scatterND.
  const embedding = tf.customGrad((table, ids, save) => {
    save([table, ids]);
    return {
      value: tf.gather(table, ids),
      gradFunc: (dy, [t, i]) => {
        const flat = tf.reshape(i, [-1, 1]);
        return [tf.scatterND(flat, tf.reshape(dy, [-1, t.shape[1]]), t.shape), tf.zerosLike(i)];
      },
    };
  });

  const layerNorm = (x, g, b, eps = 1e-5) => {
    const { mean, variance } = tf.moments(x, -1, true);
    return tf.add(tf.mul(tf.div(tf.sub(x, mean), tf.sqrt(tf.add(variance, eps))), g), b);
  };

  return {
    mlp: {
      prepareInput: (inp) => tf.tensor(inp.data, inp.shape),
      forward: (v, x) => dense(tf.relu(dense(x, v["fc1.weight"], v["fc1.bias"])), v["fc2.weight"], v["fc2.bias"]),
    },
    cnn: {
      // NCHW [N,1,28,28] -> NHWC
      prepareInput: (inp) => tf.transpose(tf.tensor(inp.data, inp.shape), [0, 2, 3, 1]),
      forward: (v, x) => {
        let h = tf.maxPool(tf.relu(tf.add(conv2dValid(x, v["conv1.weight"]), v["conv1.bias"])), 2, 2, "valid");
        h = tf.maxPool(tf.relu(tf.add(conv2dValid(h, v["conv2.weight"]), v["conv2.bias"])), 2, 2, "valid");
        h = tf.reshape(h, [h.shape[0], -1]);
        h = tf.relu(dense(h, v["fc1.weight"], v["fc1.bias"]));
        h = tf.relu(dense(h, v["fc2.weight"], v["fc2.bias"]));
        return dense(h, v["fc3.weight"], v["fc3.bias"]);
      },
    },
    emb: {
      prepareInput: (inp) => tf.tensor(Int32Array.from(inp.data, Number), inp.shape, "int32"),
      forward: (v, x) => {
        const h = layerNorm(embedding(v["emb.weight"], x), v["norm.weight"], v["norm.bias"]);
        return dense(tf.mean(h, 1), v["head.weight"], v["head.bias"]);
      },
    },
  };
})();
