"""Layer 2, formats. A model folder as the Hugging Face Hub has it for transformers.js (the onnx-community layout:
``config.json``, the tokenizer files, ``onnx/model.onnx`` and its quantized variants such as
``onnx/model_quantized.onnx``), read from uploaded files or a zip, and written back around a fine-tuned model.

transformers.js picks the file by its ``dtype``: ``model{suffix}.onnx`` with the suffixes of :data:`DTYPE_SUFFIX`.
Without a ``dtype`` in the call or in ``config.json``'s ``transformers.js_config``, a browser (device ``wasm``)
loads ``q8`` (``model_quantized.onnx``) and Node.js (device ``cpu``) ``fp32`` (``model.onnx``): transformers.js
4.3's ``DEFAULT_DEVICE_DTYPE_MAPPING``. Reading picks the same file unless told otherwise; writing sets the
config's ``dtype`` where these defaults would look for a file the folder does not hold."""
from __future__ import annotations

import io
import json
import re
import zipfile
from typing import Dict, List, Mapping, NamedTuple, Optional

from pytrain.base import limits
from pytrain.errors import DataError

#: transformers.js' dtypes and the ``onnx/model{suffix}.onnx`` each loads (its DEFAULT_DTYPE_SUFFIX_MAPPING)
DTYPE_SUFFIX = {"fp32": "", "fp16": "_fp16", "int8": "_int8", "uint8": "_uint8", "q8": "_quantized", "q4": "_q4",
                "q4f16": "_q4f16", "bnb4": "_bnb4"}
#: what transformers.js loads in a browser when neither the call nor config.json names a dtype
BROWSER_DEFAULT_DTYPE = "q8"
#: the key of config.json transformers.js reads its options from
JS_CONFIG = "transformers.js_config"
ONNX_DIR = "onnx"
#: the members a Hub folder's zip may hold at most (a model folder holds a dozen)
MAX_MEMBERS = 256
_ZIP_MAGIC = b"PK\x03\x04"
_SUFFIX_DTYPE = {s: d for d, s in DTYPE_SUFFIX.items()}
_MODEL_RE = re.compile(r"^model(_[a-z0-9]+)?\.onnx$")
#: a tokenizer_config.json transformers.js accepts when the upload had none (it loads no tokenizer without one)
MINIMAL_TOKENIZER_CONFIG = {"tokenizer_class": "PreTrainedTokenizerFast"}


class HubFolder(NamedTuple):
    """The model chosen from a Hub folder: ``model_name`` (its path in the folder), its bytes, its transformers.js
    ``dtype``, the ``dtypes`` the folder offers, ``external`` data files next to it (by file name) and ``files``:
    everything else the folder holds that is not an ONNX model (config.json, tokenizer files, ...), by path."""
    model_name: str
    model: bytes
    dtype: str
    dtypes: List[str]
    external: Dict[str, bytes]
    files: Dict[str, bytes]

    @property
    def config(self) -> Optional[bytes]:
        return self.files.get("config.json")

    @property
    def tokenizer(self) -> Optional[bytes]:
        return self.files.get("tokenizer.json")


def _norm(name: str) -> str:
    """A file's path in the folder, with / between its parts; a path out of the folder is refused."""
    path = str(name).replace("\\", "/").lstrip("/")
    if ".." in path.split("/"):
        raise DataError("%r points out of the model's folder" % str(name))
    return path


def unpack(files: Mapping[str, bytes], where: str = "the upload") -> Dict[str, bytes]:
    """{path: bytes} of uploaded files, zips expanded in place of themselves, and the folder's own name taken off
    (``tiny-gpt2/onnx/model.onnx`` -> ``onnx/model.onnx``) when every path starts with it."""
    out: Dict[str, bytes] = {}
    for name, blob in files.items():
        blob = bytes(blob)
        if _norm(name).lower().endswith(".zip") or blob[:4] == _ZIP_MAGIC:
            try:
                with zipfile.ZipFile(io.BytesIO(blob)) as z:
                    members = [m for m in z.infolist() if not m.is_dir()]
                    if len(members) > MAX_MEMBERS:
                        raise DataError("%s holds %d files; a model folder holds a dozen" % (name, len(members)))
                    for m in members:   # before inflating anything
                        limits.check_file(m.file_size, "%s!%s" % (name, m.filename))
                    out.update((_norm(m.filename), z.read(m)) for m in members)
            except (zipfile.BadZipFile, OSError, ValueError) as e:
                if isinstance(e, DataError):
                    raise
                raise DataError("%s is a damaged zip file (%s)" % (name, e)) from None
        else:
            out[_norm(name)] = blob
    out = {k: v for k, v in out.items() if k and not k.split("/")[-1].startswith(".")}
    tops = {k.split("/", 1)[0] for k in out}
    if len(tops) == 1 and all("/" in k for k in out) and tops != {ONNX_DIR}:
        out = {k.split("/", 1)[1]: v for k, v in out.items()}
    return out


def _models(files: Mapping[str, bytes]) -> Dict[str, str]:
    """{dtype: path} of the folder's ``model{suffix}.onnx`` files (the one .onnx file as fp32 when it has no such
    name)."""
    found: Dict[str, str] = {}
    onnx = sorted(k for k in files if k.lower().endswith(".onnx"))
    for path in onnx:
        m = _MODEL_RE.match(path.split("/")[-1])
        if m and (m.group(1) or "") in _SUFFIX_DTYPE and _SUFFIX_DTYPE[m.group(1) or ""] not in found:
            found[_SUFFIX_DTYPE[m.group(1) or ""]] = path
    if not found and len(onnx) == 1:
        found["fp32"] = onnx[0]
    return found


def config_dtype(config: Optional[bytes]) -> Optional[str]:
    """The dtype a config.json's ``transformers.js_config`` names (a single string), else None."""
    if not config:
        return None
    try:
        cfg = json.loads(bytes(config).decode("utf-8"))
    except ValueError:
        return None
    d = cfg.get(JS_CONFIG, {}).get("dtype") if isinstance(cfg, dict) and isinstance(cfg.get(JS_CONFIG), dict) else None
    return d if isinstance(d, str) else None


def default_dtype(dtypes: List[str], config: Optional[bytes] = None) -> Optional[str]:
    """The file transformers.js loads in a browser: config.json's dtype, else q8, else fp32 (of those present)."""
    for d in (config_dtype(config), BROWSER_DEFAULT_DTYPE, "fp32"):
        if d in dtypes:
            return d
    return dtypes[0] if len(dtypes) == 1 else None


def read_folder(files: Mapping[str, bytes], dtype: str = "auto", where: str = "the upload") -> HubFolder:
    """The model of a Hub folder given as its files or a zip ({path: bytes}): ``dtype`` names the variant
    (``fp32`` for ``onnx/model.onnx``, ``q8`` for ``onnx/model_quantized.onnx``, ...; ``auto``: what
    transformers.js loads in a browser, :func:`default_dtype`). Raises DataError naming what the folder holds."""
    files = unpack(files, where)
    found = _models(files)
    if not found:
        raise DataError("%s holds no ONNX model (%s); choose the folder with onnx/model.onnx or the .onnx file"
                        % (where, ", ".join(sorted(files)) or "no files"))
    choice = default_dtype(sorted(found), files.get("config.json")) if dtype in ("auto", "", None) else dtype
    if choice not in found:
        raise DataError("%s has no %s model%s; it holds %s" % (
            where, dtype if dtype not in ("auto", "", None) else "default",
            " (onnx/model%s.onnx)" % DTYPE_SUFFIX[dtype] if dtype in DTYPE_SUFFIX else "",
            ", ".join("%s (%s)" % (p, d) for d, p in sorted(found.items()))))
    path = found[choice]
    stem = path.split("/")[-1]
    external = {k.split("/")[-1]: v for k, v in files.items()
                if k.split("/")[-1].startswith(stem + "_data") or k.split("/")[-1].startswith(stem + ".data")}
    rest = {k: v for k, v in files.items() if not k.lower().endswith(".onnx") and ".onnx_data" not in k
            and ".onnx.data" not in k}
    return HubFolder(path, files[path], choice, sorted(found), external, rest)


def _config_for(config: bytes, dtypes: List[str]) -> bytes:
    """config.json with ``transformers.js_config.dtype`` set when transformers.js' defaults (q8 in a browser, fp32
    in Node.js) or the file's own dtype would look for a model the folder does not hold; inlined weights, so no
    external data format."""
    try:
        cfg = json.loads(bytes(config).decode("utf-8"))
    except ValueError as e:
        raise DataError("the model's config.json is not JSON (%s)" % e) from None
    if not isinstance(cfg, dict):
        raise DataError("the model's config.json holds %s, not an object" % type(cfg).__name__)
    js = dict(cfg.get(JS_CONFIG) or {})
    js.pop("use_external_data_format", None)
    current = js.get("dtype") if isinstance(js.get("dtype"), str) else None
    if current not in dtypes:
        js.pop("dtype", None)
        if not {"fp32", BROWSER_DEFAULT_DTYPE} <= set(dtypes):
            js["dtype"] = next((d for d in dtypes if d != "fp32"), "fp32")
    if js:
        cfg[JS_CONFIG] = js
    else:
        cfg.pop(JS_CONFIG, None)
    return (json.dumps(cfg, indent=2, sort_keys=True) + "\n").encode("utf-8")


def transformers_js_files(models: Mapping[str, bytes], files: Mapping[str, bytes]) -> Dict[str, bytes]:
    """{path: bytes} of a folder transformers.js loads as it is: ``models`` ({dtype: ONNX bytes}) as
    ``onnx/model{suffix}.onnx``, ``files`` (config.json, tokenizer files, ... by path; ONNX files among them
    left out) beside them, config.json's dtype set so that both a browser and Node.js find a model, and a minimal
    tokenizer_config.json when a tokenizer.json came without one (transformers.js needs both)."""
    unknown = [d for d in models if d not in DTYPE_SUFFIX]
    if unknown or not models:
        raise DataError("transformers.js loads the dtypes %s, not %s" % (", ".join(DTYPE_SUFFIX), unknown or "none"))
    files = {_norm(k): bytes(v) for k, v in files.items()}
    if "config.json" not in files:
        raise DataError("transformers.js needs the model's config.json beside the model: give the Hub folder's "
                        "config.json")
    out = {k: v for k, v in files.items() if not k.lower().endswith(".onnx") and ".onnx_data" not in k
           and ".onnx.data" not in k}
    out["config.json"] = _config_for(files["config.json"], sorted(models))
    if "tokenizer.json" in out and "tokenizer_config.json" not in out:
        out["tokenizer_config.json"] = (json.dumps(MINIMAL_TOKENIZER_CONFIG, indent=2) + "\n").encode("utf-8")
    for d, blob in models.items():
        out["%s/model%s.onnx" % (ONNX_DIR, DTYPE_SUFFIX[d])] = bytes(blob)
    return out


def zip_folder(files: Mapping[str, bytes], top: str = "") -> bytes:
    """The folder as zip bytes (deflated; fixed dates, so the same files give the same zip), under ``top/``."""
    out = io.BytesIO()
    prefix = (top.strip("/") + "/") if top.strip("/") else ""
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for path in sorted(files):
            z.writestr(zipfile.ZipInfo(prefix + path, date_time=(1980, 1, 1, 0, 0, 0)), bytes(files[path]),
                       compress_type=zipfile.ZIP_DEFLATED)
    return out.getvalue()
