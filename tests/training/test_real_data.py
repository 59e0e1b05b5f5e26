"""Real data: scikit-learn's digits. An MLP and a small CNN trained with pytrain reach >= 97%
test accuracy, and the exported models give the same predictions in onnxruntime."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

from pytrain.generator import artifacts, models
from pytrain.device.api import CheckpointState, Module, Optimizer


@pytest.fixture(scope="module")
def digits():
    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32)
    return train_test_split(x, y.astype(np.int64), test_size=0.25, random_state=0, stratify=y)


def _train(model, x_train, y_train, epochs, lr, batch=32, seed=0):
    arts = artifacts.generate_artifacts(model, loss=artifacts.LossType.CrossEntropyLoss,
                                        optimizer=artifacts.AdamW(), additional_output_names=["output"])
    state = CheckpointState.load_checkpoint(arts.checkpoint)
    module = Module(arts.training_model, state, arts.eval_model)
    opt = Optimizer(arts.optimizer_model, module)
    opt.set_learning_rate(lr)
    rng = np.random.default_rng(seed)
    for _ in range(epochs):
        order = rng.permutation(len(x_train))
        for i in range(0, len(order), batch):
            idx = order[i:i + batch]
            module(x_train[idx], y_train[idx])
            opt.step()
            module.lazy_reset_grad()
    module.eval()
    return module


def _check(module, x_test, y_test, input_shape):
    x = x_test.reshape((-1,) + input_shape)
    loss, logits = module(x, y_test)
    accuracy = float((logits.argmax(axis=1) == y_test).mean())
    exported = module.export_model_for_inferencing(None, ["output"])
    onnx.checker.check_model(onnx.load_from_string(exported), full_check=True)
    ort_logits = ort.InferenceSession(exported).run(None, {"input": x})[0]
    np.testing.assert_array_equal(ort_logits.argmax(axis=1), logits.argmax(axis=1))
    np.testing.assert_allclose(ort_logits, logits, rtol=1e-4, atol=1e-4)
    return accuracy


def test_digits_mlp(digits):
    x_train, x_test, y_train, y_test = digits
    module = _train(models.mlp(64, [128], 10, seed=0), x_train, y_train, epochs=20, lr=3e-3)
    assert _check(module, x_test, y_test, (64,)) >= 0.97


def test_digits_cnn(digits):
    x_train, x_test, y_train, y_test = digits
    cnn = models.cnn((1, 8, 8), 10, channels=(16, 32), hidden=64, seed=0)
    module = _train(cnn, x_train.reshape(-1, 1, 8, 8), y_train, epochs=12, lr=3e-3)
    assert _check(module, x_test, y_test, (1, 8, 8)) >= 0.97
