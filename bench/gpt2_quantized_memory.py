"""LoRA on a quantized GPT-2-shaped base: ``Module.memory_estimate`` and the native step time of the float32 file,
its q8 form (onnxruntime's ``quantize_dynamic``, as transformers.js' model_quantized.onnx) and its q4 form
(onnxruntime's MatMul4BitsQuantizer, symmetric blocks of 32) (not part of the suite; numbers in
docs/quantized.md).

bench/gpt2_memory.py's model (vocabulary 50,257, n_embd 768, 12 heads, random init, ``--layers`` layers) exported
by ``pytrain.torch_export``, LoRA rank 8 (alpha 16) on ``c_attn``, AdamW, 128 tokens at batch 1.

    PYTHONPATH=.:tests/helpers:tests/training:bench python bench/gpt2_quantized_memory.py --layers 2 4
"""
from __future__ import annotations

import argparse
import logging
import os
import tempfile
import time

import numpy as np

MIB = 2.0 ** 20


def forms(layers: int) -> dict:
    """{"f32", "q8", "q4"}: the model's bytes in each form."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnxruntime.quantization.matmul_nbits_quantizer import DefaultWeightOnlyQuantConfig, MatMulNBitsQuantizer

    from gpt2_memory import source
    from test_qlora import gemm_as_matmul

    blob = bytes(source(layers, vocab_last=True))
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "model.onnx")
        with open(path, "wb") as f:
            f.write(blob)
        logging.disable(logging.WARNING)
        quantize_dynamic(path, path + ".q8", weight_type=QuantType.QInt8, extra_options={"MatMulConstBOnly": True})
        with open(path + ".q8", "rb") as f:
            q8 = f.read()
    q = MatMulNBitsQuantizer(gemm_as_matmul(onnx.load_from_string(blob)),
                             algo_config=DefaultWeightOnlyQuantConfig(block_size=32, is_symmetric=True))
    q.process()
    return {"f32": blob, "q8": q8, "q4": q.model.model.SerializeToString()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layers", type=int, nargs="+", default=[2])
    args = ap.parse_args()
    from pytrain.generator import artifacts
    from pytrain.device.api import CheckpointState, Module, Optimizer
    from pytrain.engine.lora import LoRA
    from pytrain.generator.losses import CausalLMLoss

    ids = np.random.default_rng(0).integers(0, 50257, (1, 128)).astype(np.int64)
    for layers in args.layers:
        for name, blob in forms(layers).items():
            arts = artifacts.generate_artifacts(blob, lora=LoRA(8, 16.0, ["c_attn"]), loss=CausalLMLoss(),
                                                optimizer=artifacts.AdamW())
            module = Module(arts.training_model, CheckpointState.load_checkpoint(arts.checkpoint), arts.eval_model)
            opt = Optimizer(arts.optimizer_model, module)
            est = module.memory_estimate(ids, optimizer=opt, batch_size=1)
            times = []
            for _ in range(2):
                t = time.time()
                module(ids)
                opt.step()
                module.lazy_reset_grad()
                times.append(time.time() - t)
            print("layers %d %s: file %.1f MB, %s; step %.2f s" % (layers, name, len(blob) / 1e6, est.describe(),
                                                                     times[-1]), flush=True)


if __name__ == "__main__":
    main()
