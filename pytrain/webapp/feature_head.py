"""A pretrained feature extractor the user brings as ONNX ("By example" with a backbone, as
Teachable Machine does with MobileNet): the backbone is frozen, only a new head trains.

* The backbone runs for inference, as :func:`pytrain.engine.export.export_inference_model` writes a
  model: BatchNorm on its running statistics, Dropout the identity. Its names get the prefix
  ``backbone/`` (its input becomes ``input``), an optional normalisation is put in front
  (:func:`pytrain.generator.models.with_standardization`), and a 4-D output is pooled (GlobalAveragePool,
  Flatten) into one feature vector per image: that graph is the *extractor*.
* Frozen and deterministic, it runs once per example: features are cached by the sample's bytes.
* The head is one Gemm (:func:`pytrain.generator.models.mlp` with no hidden layer) trained with softmax
  cross-entropy on the features.
* :meth:`Backbone.compose` joins the extractor and the exported head in one ONNX graph (head names
  prefixed ``head/``, every weight inlined), which is what the page exports.

The extractor's bytes ride along in the session's artifacts under :data:`ARTIFACT_KEY`, so the
run saved in the browser (IndexedDB) resumes with its backbone (and, saved with the examples, the
features its head trained on: :func:`with_features`; a rebuild from the restored examples uses the
extractor as it is: :func:`reuse`), and in the run file (a member
``backbone.onnx``, its weights inline, marked :data:`MARK`), which the page and the widget take
back. ``pytrain train --resume`` refuses that run (:data:`NO_CLI_RESUME`): the CLI trains a model
on its raw inputs, so it would have to run the backbone for every batch and put it in front of the
head at export, which it does not do; a table of the features instead of the images would train
the head exactly, but its export would be the head alone, answering features rather than images.
"""
from __future__ import annotations

import hashlib
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

from pytrain.base import dtypes
from pytrain.errors import DataError, PytrainError
from pytrain.proto import ModelProto, make_node, make_value_info, opset_version, value_info_type
from pytrain.proto.onnx_pb import StringStringEntryProto
from pytrain.run.runfile import BACKBONE_MARK
from pytrain.webapp.common import WebappError, core_api, load_upload

ARTIFACT_KEY = "backbone"
INPUT = "input"
FEATURES = "backbone/features"
HEAD_INPUT = "features"
OUTPUT = "output"
DEFAULT_SIZE = 96          # side of the square input when the backbone leaves H and W open
SIZES = (64, 96, 128, 160, 224)
MAX_SIDE = 1024            # a declared input larger than this is refused (a tab cannot hold it)
CACHE_LIMIT = 20000        # cached feature vectors (training/validation examples; live frames beyond are not kept)
CHUNK = 8                  # images per extractor run when the batch size is free
#: what the page may put in front of the backbone, and how it says it
NORMALIZATIONS = {
    "unit": (None, "pixels in [0, 1]"),
    "imagenet": (([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]),
                 "pixels in [0, 1], then ImageNet mean/std: (x - [0.485, 0.456, 0.406]) / [0.229, 0.224, 0.225]"),
}
#: the extractor's metadata key: how the run file's ``backbone.onnx`` is recognised by its content
MARK = BACKBONE_MARK
#: why ``pytrain train --resume`` refuses a run file with a backbone (its checkpoint's ``pytrain.no_resume``)
NO_CLI_RESUME = ("its head trains on the features of a frozen pretrained backbone (backbone.onnx), "
                 "which the CLI does not run")


def _refuse(name: str, why: str) -> WebappError:
    return WebappError("%s cannot be used as a feature extractor: %s" % (name, why))


def _rename_tensors(g: Any, new: Callable[[str], str], node_prefix: str) -> None:
    """Rename (in place) every tensor of graph ``g`` by ``new`` and prefix its node names, so two
    graphs can be joined without clashes."""
    for n in g.node:
        n.input[:] = [new(s) for s in n.input]
        n.output[:] = [new(s) for s in n.output]
        n.name = node_prefix + (n.name or n.op_type)
    for t in g.initializer:
        t.name = new(t.name)
    for v in list(g.input) + list(g.output) + list(g.value_info):
        v.name = new(v.name)


def _rename_graph(model: ModelProto, name: str) -> Tuple[str, str]:
    """Prefix every tensor and node name with ``backbone/`` and call the image input ``input``
    (in place). Returns (old input name, old output name)."""
    g = model.graph
    inits = {t.name for t in g.initializer}
    inputs = [v for v in g.input if v.name not in inits]
    if len(inputs) != 1:
        raise _refuse(name, "it takes %d inputs (%s); a feature extractor takes one image batch [N, C, H, W]"
                      % (len(inputs), ", ".join(v.name for v in inputs) or "none"))
    if not g.output:
        raise _refuse(name, "it has no output")
    for n in g.node:
        for a in n.attribute:
            if a.HasField("g") or a.graphs:
                raise _refuse(name, "node %r (%s) holds a subgraph; control flow (If, Loop, Scan) is not supported "
                              "in a backbone" % (n.name, n.op_type))
    old_in, old_out = inputs[0].name, g.output[0].name

    def new(s: str) -> str:
        if not s:
            return s
        return INPUT if s == old_in else "backbone/" + s

    _rename_tensors(g, new, "backbone/")
    g.input[:] = [v for v in g.input if v.name == INPUT]   # initializers need no graph input
    del g.output[1:]                                       # the first output is the features
    return old_in, old_out


def _image_shape(model: ModelProto, name: str, size: Optional[int]) -> Tuple[List[int], Any, bool]:
    """([C, H, W], batch dim, whether H and W were open) of the backbone's input."""
    v = [v for v in model.graph.input if v.name == INPUT][0]
    et, shape = value_info_type(v)
    if et not in (dtypes.FLOAT,):
        raise _refuse(name, "its input %r is %s, not float32 pixels" % (v.name, dtypes.NAMES.get(et, et)))
    if shape is None or len(shape) != 4:
        raise _refuse(name, "its input has shape %s; an image model takes [N, C, H, W] (rank 4)"
                      % ("unknown" if shape is None else [d if d is not None else "?" for d in shape]))
    batch, c, h, w = shape
    if not isinstance(c, int):
        c = 3
    if c not in (1, 3):
        raise _refuse(name, "its input has %s channels; the page gives 1 (grey) or 3 (colour)" % c)
    open_hw = not (isinstance(h, int) and isinstance(w, int) and h > 0 and w > 0)
    side = int(size) if size else DEFAULT_SIZE
    h = h if isinstance(h, int) and h > 0 else side
    w = w if isinstance(w, int) and w > 0 else side
    if not (8 <= h <= MAX_SIDE and 8 <= w <= MAX_SIDE):
        raise _refuse(name, "its input is %dx%d pixels; between 8 and %d per side is supported" % (h, w, MAX_SIDE))
    if isinstance(batch, int) and batch > 1:
        raise _refuse(name, "its batch size is fixed at %d; export it with a dynamic batch (or batch 1)" % batch)
    return [c, h, w], batch, open_hw


def _fresh_names(g: Any, kind: str) -> Callable[[str], str]:
    """A function giving ``base``, or ``base_1``, ``base_2``... when the graph already names a
    tensor (or a node) so: the names the page adds to a backbone never meet the backbone's own."""
    if kind == "node":
        used = {n.name for n in g.node}
    else:
        used = {t.name for t in g.initializer} | {v.name for v in list(g.input) + list(g.output) + list(g.value_info)}
        used.update(s for n in g.node for s in list(n.input) + list(n.output))

    def fresh(base: str) -> str:
        name, k = base, 0
        while name in used:
            k += 1
            name = "%s_%d" % (base, k)
        used.add(name)
        return name
    return fresh


def _float_params(model: ModelProto) -> int:
    float_types = (dtypes.FLOAT, dtypes.DOUBLE, dtypes.FLOAT16, dtypes.BFLOAT16)
    return int(sum(int(np.prod(list(t.dims))) if len(t.dims) else 1
                   for t in model.graph.initializer if t.data_type in float_types))


def extractor(blob: bytes, name: str = "the backbone", extra_files: Optional[Dict[str, bytes]] = None,
              size: Optional[int] = None, normalize: str = "unit") -> Tuple[bytes, Dict[str, Any]]:
    """The uploaded backbone made into an extractor (see the module docstring): its bytes, and
    what the page shows (input shape, parameters, feature size, normalisation)."""
    from pytrain.engine.export import export_inference_model
    from pytrain.engine.runtime import InferenceSession

    _, models, _ = core_api()
    if normalize not in NORMALIZATIONS:
        raise WebappError("unknown normalisation %r: expected one of %s" % (normalize, ", ".join(NORMALIZATIONS)))
    model = load_upload(blob, name, extra_files)          # ModelFormatError for what is not ONNX
    params = _float_params(model)
    old_in, old_out = _rename_graph(model, name)
    shape, batch, open_hw = _image_shape(model, name, size)
    vi = [v for v in model.graph.input if v.name == INPUT][0]
    vi.type = make_value_info(INPUT, dtypes.FLOAT, [1 if batch == 1 else "N"] + shape).type
    try:
        # inference mode (BatchNorm on running statistics, no Dropout), standard ops only
        ready = export_inference_model(model, {}, [model.graph.output[0].name])
        probe = InferenceSession(ready).run(None, {INPUT: np.zeros([1] + shape, np.float32)})[0]
    except PytrainError as e:
        raise _refuse(name, str(e))
    except (ValueError, TypeError, IndexError, KeyError, MemoryError) as e:
        raise _refuse(name, "it does not run on a %s image (%s: %s)" % ("x".join(map(str, shape)), type(e).__name__, e))
    if probe.dtype.kind != "f" or probe.ndim not in (2, 3, 4) or probe.shape[0] != 1:
        raise _refuse(name, "its output %r has shape %s (%s); a feature extractor gives [N, D] or [N, C, H, W] floats"
                      % (old_out, list(probe.shape), probe.dtype))
    g = ready.graph
    out = g.output[0].name
    tensors = _fresh_names(g, "tensor")
    nodes = _fresh_names(g, "node")
    if probe.ndim == 4:   # a feature map: average each channel over the image
        pooled = tensors("backbone/pooled")
        g.node.append(make_node("GlobalAveragePool", [out], [pooled], name=nodes("backbone/neck/pool")))
        out = pooled
    features = tensors(FEATURES)   # the backbone's own output may be called "features" too
    g.node.append(make_node("Flatten", [out], [features], name=nodes("backbone/neck/flatten"), axis=1))
    feature_size = int(np.prod(probe.shape[1:])) if probe.ndim != 4 else int(probe.shape[1])
    g.output[:] = [make_value_info(features, dtypes.FLOAT, [1 if batch == 1 else "N", feature_size])]
    mean_std, said = NORMALIZATIONS[normalize]
    if mean_std is not None:
        if shape[0] != 3:
            raise WebappError("ImageNet normalisation needs a colour (3-channel) input; %s takes %d channel(s)"
                              % (name, shape[0]))
        ready, _ = models.with_standardization(ready, np.asarray(mean_std[0], np.float32).reshape(3, 1, 1),
                                               np.asarray(mean_std[1], np.float32).reshape(3, 1, 1), INPUT)
    info = {"name": name, "input": old_in, "output": old_out, "shape": shape, "open_size": open_hw,
            "batch": 1 if batch == 1 else None, "params": params, "features": feature_size,
            "pooled": probe.ndim == 4, "normalize": normalize, "normalization": said,
            "opset": opset_version(ready), "nodes": len(g.node)}
    ready.metadata_props.append(StringStringEntryProto(key=MARK, value="backbone"))
    return ready.SerializeToString(), info


def marked(blob: bytes) -> bytes:
    """The extractor ``blob`` carrying :data:`MARK` (extractors made before the mark get it here)."""
    model = ModelProto.FromString(bytes(blob))
    if any(p.key == MARK for p in model.metadata_props):
        return bytes(blob)
    model.metadata_props.append(StringStringEntryProto(key=MARK, value="backbone"))
    return model.SerializeToString()


def describe(blob: bytes, *args: Any, **options: Any) -> Dict[str, Any]:
    """What the page shows when a backbone is chosen (the checks of :func:`extractor` included);
    the arguments are :func:`extractor`'s, unset ones keep its defaults."""
    return dict(extractor(blob, *args, **options)[1], sizes=list(SIZES))


class Backbone:
    """The extractor of one run: cached features, the head's outputs on them, the composed export."""

    def __init__(self, blob: bytes, info: Dict[str, Any], cache: Optional[Dict[bytes, np.ndarray]] = None) -> None:
        from pytrain.engine.runtime import InferenceSession

        self.blob = bytes(blob)
        self.info = dict(info)
        self._session = InferenceSession(self.blob)
        self._cache: Dict[bytes, np.ndarray] = cache if cache is not None else {}
        self._head: Optional[Tuple[int, Any]] = None

    def features(self, x: np.ndarray) -> np.ndarray:
        """[N, D] features of images [N, C, H, W]; each distinct image runs through the backbone once."""
        x = np.ascontiguousarray(x, dtype=np.float32)
        keys = [_key(row) for row in x]
        fresh: Dict[bytes, np.ndarray] = {}
        todo = [i for i, k in enumerate(keys) if k not in self._cache and k not in fresh]
        todo = list({keys[i]: i for i in todo}.values())
        chunk = 1 if self.info.get("batch") == 1 else CHUNK
        for s in range(0, len(todo), chunk):
            idx = todo[s:s + chunk]
            out = self._session.run(None, {INPUT: x[idx]})[0]
            for i, row in zip(idx, out):
                fresh[keys[i]] = np.array(row, dtype=np.float32)
        for k, v in fresh.items():
            if len(self._cache) < CACHE_LIMIT:
                self._cache[k] = v
        return np.stack([self._cache[k] if k in self._cache else fresh[k] for k in keys])

    def first_features(self, x: np.ndarray) -> np.ndarray:
        """The extractor's features of the first image of ``x``, computed now (not from the cache)."""
        return self._session.run(None, {INPUT: x[:1]})[0][0]

    def remember(self, x: np.ndarray, features: np.ndarray) -> None:
        """Keep ``features`` as the features of the images ``x`` (as a run computed them), up to the cache's limit."""
        for image, f in zip(x[:CACHE_LIMIT], features):
            self._cache[_key(image)] = np.array(f, dtype=np.float32)

    def same_extractor(self, blob: bytes) -> "Backbone":
        """A Backbone of ``blob`` (this extractor's bytes) keeping this one's description and cached features."""
        return Backbone(blob, self.info, self._cache)

    def head_outputs(self, module: Any, output: str, step: int, x: np.ndarray) -> np.ndarray:
        """The head's outputs on the images' features (what :meth:`compose` computes in one graph)."""
        from pytrain.engine.runtime import InferenceSession

        if self._head is None or self._head[0] != step:
            self._head = (step, InferenceSession(bytes(module.export_model_for_inferencing(None, [output]))))
        return np.asarray(self._head[1].run(None, {HEAD_INPUT: self.features(x)})[0])

    def compose(self, head_bytes: bytes) -> bytes:
        """One model: the extractor, then the head (its names prefixed ``head/``, its input wired to
        the features). Same opset as the extractor: the head's Gemm means the same from opset 7 on."""
        ext = ModelProto.FromString(self.blob)
        ext.metadata_props[:] = [p for p in ext.metadata_props if p.key != MARK]   # a whole model, not an extractor
        head = ModelProto.FromString(bytes(head_bytes))
        hg = head.graph
        odd = sorted({n.op_type for n in hg.node} - {"Gemm", "Identity"})
        if odd:
            raise WebappError("the head has ops %s; only Gemm composes with a backbone" % odd)

        features = ext.graph.output[0].name   # FEATURES, or a fresh name when the backbone used that one

        def new(s: str) -> str:
            if not s or s == OUTPUT:
                return s
            return features if s == HEAD_INPUT else "head/" + s

        _rename_tensors(hg, new, "head/")
        g = ext.graph
        g.node.extend(hg.node)
        g.initializer.extend(hg.initializer)
        g.output[:] = [make_value_info(OUTPUT, dtypes.FLOAT, [1 if self.info.get("batch") == 1 else "N",
                                                             value_info_type(hg.output[0])[1][-1]])]
        g.name = "backbone_and_head"
        return ext.SerializeToString()


def _key(image: np.ndarray) -> bytes:
    return hashlib.blake2b(np.ascontiguousarray(image, dtype=np.float32).tobytes(), digest_size=16).digest()


def with_features(blob: bytes, info: Dict[str, Any], x: np.ndarray, features: Optional[np.ndarray]) -> Backbone:
    """The extractor of a run file, its cache holding ``features`` for the images ``x`` as the run
    computed them (the same images in other batches could give other last bits); one image runs
    through it to check the two belong together. Without ``features`` they are computed on use."""
    if not info.get("shape") or not info.get("features"):
        raise WebappError("the run description does not say what the backbone takes and gives (model.backbone)")
    bb = Backbone(blob, info)
    if features is None or not len(x):
        return bb
    shape = [int(s) for s in info["shape"]]
    if x[0].size != int(np.prod(shape)):
        raise WebappError("the run file's examples are %s; its backbone takes %s images" % (list(x.shape[1:]), shape))
    x = np.ascontiguousarray(x, dtype=np.float32).reshape([len(x)] + shape)
    if features.dtype != np.float32 or features.shape != (len(x), int(info["features"])):
        raise WebappError("the run file's features.npy is %s %s; its %d examples need float32 [%d, %d]"
                          % (features.dtype, list(features.shape), len(x), len(x), int(info["features"])))
    fresh = bb.first_features(x)
    if not np.allclose(fresh, features[0], rtol=1e-4, atol=1e-5 * max(1.0, float(np.abs(fresh).max()))):
        raise WebappError("the run file's features.npy is not what its backbone.onnx computes for the first "
                          "example; choose one run's files")
    bb.remember(x, features)
    return bb


def reuse(blob: bytes, info: Dict[str, Any]) -> Tuple[bytes, Dict[str, Any]]:
    """An extractor :func:`extractor` made before (a restored run's, marked :data:`MARK`) with its
    description ``info``, used as it is: its renaming, normalisation and pooling are in it already,
    so it must not go through :func:`extractor` again. One blank image checks the two belong together."""
    from pytrain.engine.runtime import InferenceSession

    name = str(info.get("name") or "the backbone")
    try:
        model = ModelProto.FromString(bytes(blob))
    except Exception:  # any decoder failure: not an extractor this page made
        raise _refuse(name, "it is not the feature extractor saved with the run") from None
    if not any(p.key == MARK for p in model.metadata_props):
        raise _refuse(name, "it is not the feature extractor saved with the run (no %s mark)" % MARK)
    shape = [int(s) for s in info.get("shape") or []]
    if len(shape) != 3 or not info.get("features"):
        raise WebappError("the run's description of %s does not say what it takes and gives" % name)
    out = InferenceSession(bytes(blob)).run(None, {INPUT: np.zeros([1] + shape, np.float32)})[0]
    if list(out.shape) != [1, int(info["features"])]:
        raise WebappError("%s gives %s features; the run's description says %d"
                          % (name, list(out.shape[1:]), int(info["features"])))
    return bytes(blob), dict(info)


def build(session: Any, spec: Dict[str, Any], optimizer: str, seed: int = 0) -> Tuple[Dict[str, bytes], Dict[str, Any]]:
    """Artifacts and model description for a head on ``spec``'s backbone ({bytes, name,
    extra_files, size, normalize}, or {bytes, info} for the extractor of a restored run, see
    :func:`reuse`) over the session's images; fills the feature cache."""
    from pytrain.webapp.demo import generate_bytes

    _, models, _ = core_api()
    d = session.need_data()
    if spec.get("info"):   # the extractor a run came back with (resumed, or from its run file)
        blob, info = reuse(spec["bytes"], spec["info"])
    else:
        blob, info = extractor(spec["bytes"], **{k: spec[k] for k in ("name", "extra_files", "size", "normalize")
                                                 if spec.get(k) is not None})
    shape = [int(s) for s in d["train_x"].shape[1:]]
    if shape != info["shape"] or d["task"] != "classification" or d["num_classes"] < 2:
        raise DataError("the examples are %s images of %d class(es); the backbone takes %s images and the head "
                        "needs at least 2 classes" % (shape, d["num_classes"], info["shape"]))
    backbone = Backbone(blob, info)
    seen = []
    for part in ("train_x", "val_x"):   # once per example: later epochs read the cache
        for i in range(0, len(d[part]), 64):
            seen.append(backbone.features(d[part][i:i + 64]))
    k = int(d["num_classes"])
    head = models.mlp(info["features"], [], k, seed=int(seed), input_name=HEAD_INPUT, output_name=OUTPUT)
    arts = generate_bytes(head, "CrossEntropyLoss", optimizer, output_name=OUTPUT)
    arts[ARTIFACT_KEY] = blob
    session.backbone = backbone
    model = {"origin": "backbone", "input": INPUT, "output": OUTPUT, "loss": "CrossEntropyLoss",
             "optimizer": optimizer, "sample_shape": info["shape"], "backbone": info,
             "head_params": info["features"] * k + k}
    warning = flat_features_warning(np.concatenate(seen), info.get("name") or "the feature extractor")
    if warning:
        model["warning"] = warning
    return arts, model


#: features whose spread across the examples is below this share of their size carry no signal
FLAT_SPREAD = 1e-4


def flat_features_warning(features: np.ndarray, name: str) -> Optional[str]:
    """What to tell when an extractor gives (almost) the same features for every example (a head
    on them trains at chance: e.g. a randomly initialised MobileNetV2 in eval mode varies by ~1e-8),
    or None when they vary."""
    f = np.asarray(features, dtype=np.float64).reshape(len(features), -1)
    if len(f) < 2:
        return None
    size = float(np.max(np.abs(f))) if f.size else 0.0
    spread = float(np.max(np.std(f, axis=0))) if f.size else 0.0
    if spread > FLAT_SPREAD * max(size, 1e-30):
        return None
    return ("Careful: {} gives almost the same features for every example (they differ by {:.1g} where the "
            "features are about {:.1g}), so the new head cannot tell your classes apart and will stay at chance. "
            "It is probably untrained: export the model with its pretrained weights, in evaluation mode, and choose "
            "it again.".format(name, spread, size))


def attach(arts: Dict[str, bytes], model: Dict[str, Any], previous: Optional[Backbone]) -> Optional[Backbone]:
    """The Backbone of artifacts that carry one (None otherwise); the features computed for the
    same extractor before (e.g. going back to the last good checkpoint) are kept."""
    blob = arts.get(ARTIFACT_KEY)
    if blob is None:
        return None
    blob = bytes(blob)
    if previous is not None and previous.blob == blob:
        return previous.same_extractor(blob)
    return Backbone(blob, model.get("backbone") or {})
