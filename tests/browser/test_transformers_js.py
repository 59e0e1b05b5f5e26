"""transformers.js itself (npm ``@huggingface/transformers``, buildsite/installs.py's TRANSFORMERS_JS_NPM, served from
this origin with its onnxruntime-web and wasm files; no remote models) loads the folder "Your text" downloads and
generates what onnxruntime's greedy loop gives on the same files. The upload is the tiny with-past GPT-2's Hub
folder as a zip (tests/fixtures/hub/gpt2): the tab trains its ``model_quantized.onnx`` (what transformers.js loads
in a browser) with LoRA on ``c_attn``; the download holds ``onnx/model.onnx`` (the float merge) and
``onnx/model_quantized.onnx`` (requantized): transformers.js with ``dtype: "fp32"`` and with its browser default
(q8) each generate the tokens of onnxruntime's greedy loop with the cache on that file (the exact oracle of
docs/quantized.md: onnxruntime-web's MatMulInteger does not saturate, this machine's x86 kernel may), and its
tokenizer, read from the download's tokenizer.json and tokenizer_config.json, gives pytrain's ids."""
from __future__ import annotations

import json

import pytest

from browser_helpers import LOAD_TIMEOUT_MS, build_text_lora, open_app, serve_files, train_epochs, wait_ms, wait_ready

ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")

from hub_fixtures import CORPUS, HUB, greedy, hub, ort_session  # noqa: E402
from quant_oracle import exact_integer_matmuls  # noqa: E402

from pytrain.text import Tokenizer  # noqa: E402
from pytrain.text.hub_folder import unpack, zip_folder  # noqa: E402
from pytrain.text.hub_inputs import plan_model  # noqa: E402

HOST = """<!doctype html>
<meta charset="utf-8">
<script type="importmap">{"imports": {"onnxruntime-web/webgpu": "/ort-test/ort/ort.webgpu.bundle.min.mjs",
                                      "onnxruntime-common": "/ort-test/ort/ort.webgpu.bundle.min.mjs"}}</script>
<script type="module">
import { env, AutoModelForCausalLM, AutoTokenizer, Tensor } from "/ort-test/tjs/transformers.web.js";
env.allowRemoteModels = false;
env.allowLocalModels = true;
env.localModelPath = "/ort-test/models/";
env.useBrowserCache = false;
env.useWasmCache = false;
env.backends.onnx.wasm.wasmPaths = { mjs: "/ort-test/ort/ort-wasm-simd-threaded.asyncify.mjs",
                                     wasm: "/ort-test/ort/ort-wasm-simd-threaded.asyncify.wasm" };
env.backends.onnx.wasm.numThreads = 1;
window.generate = async (dtype, prompt, n) => {
  const model = await AutoModelForCausalLM.from_pretrained("tuned", dtype ? { dtype } : {});
  const ids = new Tensor("int64", BigInt64Array.from(prompt.map(BigInt)), [1, prompt.length]);
  const mask = new Tensor("int64", new BigInt64Array(prompt.length).fill(1n), [1, prompt.length]);
  const out = await model.generate({ input_ids: ids, attention_mask: mask, max_new_tokens: n, do_sample: false });
  await model.dispose();
  return Array.from(out.data, Number).slice(prompt.length);
};
window.encode = async (text) => Array.from((await AutoTokenizer.from_pretrained("tuned")).encode(text));
window.ready = true;
</script>
"""


def _npm_files():
    """transformers.js' web build and the onnxruntime-web files it loads, by the paths HOST gives them."""
    from buildsite.installs import TRANSFORMERS_JS_NPM, ensure_npm_folder

    try:
        modules = ensure_npm_folder("transformers-js", TRANSFORMERS_JS_NPM) / "node_modules"
    except Exception as e:   # no npm or no registry: the oracle is missing, not the feature
        pytest.skip("transformers.js could not be installed from npm (%s)" % e)
    ort_dist = modules / "onnxruntime-web" / "dist"
    files = {"/ort-test/tjs/transformers.web.js":
             (modules / "@huggingface" / "transformers" / "dist" / "transformers.web.js").read_bytes()}
    for name in ("ort.webgpu.bundle.min.mjs", "ort-wasm-simd-threaded.asyncify.mjs",
                 "ort-wasm-simd-threaded.asyncify.wasm", "ort-wasm-simd-threaded.jsep.mjs",
                 "ort-wasm-simd-threaded.jsep.wasm"):
        files["/ort-test/ort/" + name] = (ort_dist / name).read_bytes()
    return files


def _cached_greedy(blob: bytes, config, prompt, n, eos):
    """onnxruntime's greedy loop with the cache (as transformers.js generates), the q8 blocks' integer products
    exact, stopped after an end-of-text token as generate stops."""
    sess = ort_session(exact_integer_matmuls(onnx.load_from_string(blob)))
    tokens = greedy(sess, plan_model(blob, config), prompt, n, cached=True)
    return tokens[:tokens.index(eos) + 1] if eos in tokens else tokens


def test_transformers_js_loads_the_tabs_download_and_generates_onnxruntimes_greedy_tokens(context, site_url, tmp_path):
    npm = _npm_files()
    h = hub("gpt2")
    upload = tmp_path / "gpt2.zip"
    upload.write_bytes(zip_folder({p.relative_to(h.folder).as_posix(): p.read_bytes()
                                   for p in (HUB / "gpt2").rglob("*") if p.is_file()}, "gpt2"))
    (tmp_path / "corpus.txt").write_text(CORPUS, encoding="utf-8")
    ctx, rec = context
    page = open_app(ctx, site_url, rec)
    wait_ready(page)
    build_text_lora(page, str(upload), str(tmp_path / "corpus.txt"))   # the tokenizer too comes from the zip
    train_epochs(page, 1, 300_000, batch_size=4, lr=0.01)
    with page.expect_download() as info:
        page.click("#download-transformers-js")
    folder = unpack({"download.zip": open(info.value.path(), "rb").read()})
    assert {"config.json", "tokenizer.json", "tokenizer_config.json", "onnx/model.onnx",
            "onnx/model_quantized.onnx"} <= set(folder)

    files = dict(npm, **{"/ort-test/models/tuned/" + k: v for k, v in folder.items()})
    files["/ort-test/tjs.html"] = HOST.encode("utf-8")
    serve_files(ctx, files)
    js = ctx.new_page()
    js.goto(site_url.rstrip("/") + "/ort-test/tjs.html")
    js.wait_for_function("() => window.ready === true", timeout=LOAD_TIMEOUT_MS)
    prompt = h.oracle["greedy"]["prompt"]
    eos = json.loads(folder["config.json"])["eos_token_id"]
    timeout = wait_ms(120_000)
    js.set_default_timeout(timeout)
    for dtype, path in (("fp32", "onnx/model.onnx"), (None, "onnx/model_quantized.onnx")):
        got = js.evaluate("([d, p, n]) => window.generate(d, p, n)", [dtype, prompt, 8])
        assert got == _cached_greedy(folder[path], h.config, prompt, 8, eos), (dtype, path)
    text = CORPUS[:200]
    ids = Tokenizer.from_json(folder["tokenizer.json"]).encode(text)
    assert js.evaluate("(t) => window.encode(t)", text) == ids
    assert rec.foreign(site_url) == [], rec.foreign(site_url)
