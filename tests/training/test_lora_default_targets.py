"""LoRA's default targets (``pytrain.engine.lora.default_targets``, what the page and the widget adapt when no
targets are named) against peft's defaults per model type (``TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING``,
what ``get_peft_model`` adapts with ``target_modules=None``): on tiny GPT-2, Llama, Qwen2, Phi-3, Gemma, BERT,
DistilBERT and ViT exported by both of torch's exporters, the weights chosen are those of the modules peft wraps,
a fused query-key-value projection included (GPT-2's ``c_attn``, Phi-3's ``qkv_proj``), also where the dynamo
exporter renamed the weights (``val_26``) and the nodes (``node_linear``). Each chosen weight takes an adapter."""
from __future__ import annotations

import copy

import pytest

torch, onnx, _, _ = (pytest.importorskip(m) for m in ("torch", "onnx", "transformers", "onnxscript"))

from hf_families import build, export  # noqa: E402
from torch_zoo import stub_torchvision_ops  # noqa: E402

stub_torchvision_ops()   # peft imports transformers, which imports torchvision
peft = pytest.importorskip("peft")
from peft.utils.constants import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING as PEFT_DEFAULTS  # noqa: E402

from pytrain.engine.lora import LoRA, default_targets, selected_weights  # noqa: E402
from pytrain.engine.validate import load_model  # noqa: E402
from test_architectures import match  # noqa: E402

FAMILIES = ("gpt2", "llama", "qwen2", "phi3", "gemma", "bert", "distilbert", "vit")
#: model types peft has no default for (get_peft_model asks for target_modules): peft's entry for the same
#: layout. Phi-3's fused projection is CodeGen's ``qkv_proj``; DistilBERT's query/value are ``q_lin``/``v_lin``
#: (peft's ``bert`` entry, under DistilBERT's names); ViT's (peft's ``vit`` entries of other methods: ``query``,
#: ``value``) are ``q_proj``/``v_proj`` since transformers 5 (peft's ``llama`` entry)
ANALOGUES = {"phi3": PEFT_DEFAULTS["codegen"], "distilbert": ["q_lin", "v_lin"], "vit": PEFT_DEFAULTS["llama"]}


def peft_targets(hf) -> list:
    """The modules ``get_peft_model`` wraps by default (their qualified names in ``hf``)."""
    from peft import LoraConfig, get_peft_model
    from peft.tuners.lora import LoraLayer

    model_type = hf.config.model_type
    assert (model_type in PEFT_DEFAULTS) != (model_type in ANALOGUES), model_type
    config = LoraConfig(r=2, target_modules=ANALOGUES.get(model_type))
    wrapped = get_peft_model(copy.deepcopy(hf), config)
    prefix = "base_model.model."
    return sorted(n[len(prefix):] for n, m in wrapped.named_modules() if isinstance(m, LoraLayer))


#: every family through the default (dynamo) exporter, whose names need the metadata; TorchScript's names are
#: the modules' own, so three layouts suffice there (fused c_attn, fused qkv_proj, separate query/value)
CASES = [(f, "dynamo") for f in FAMILIES] + [(f, "torchscript") for f in ("gpt2", "phi3", "bert")]


@pytest.mark.parametrize("family,exporter", CASES)
def test_default_targets_are_peft_defaults(family, exporter, tmp_path):
    model, names = build(family, exporter)
    modules = peft_targets(model.hf)
    assert modules, family
    path = export(model, family, names, exporter, str(tmp_path))
    mapping, _ = match(model, path)
    want = sorted(mapping["hf.%s.weight" % m][0] for m in modules)
    onnx_model = load_model(path)
    chosen = default_targets(onnx_model)
    assert sorted(chosen) == want, (modules, chosen)
    assert sorted(selected_weights(onnx_model, LoRA(2, targets=chosen))) == want
