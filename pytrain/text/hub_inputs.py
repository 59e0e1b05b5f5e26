"""What a Hugging Face export takes, by name, and what the text and image flows feed it: the one place that knows
the input names Optimum, ``torch.onnx.export`` and ``pytrain.torch_export`` give a transformers model.

A model's declared inputs become a :class:`FeedPlan`: each input gets a role (token ids, attention mask,
positions, token types, cache positions, an empty past, pixels), and :meth:`FeedPlan.feeds` builds the arrays
for a batch as transformers builds them for the same batch:

- ``position_ids``: ``cumsum(attention_mask) - 1``, 1 where the mask is 0 (transformers' and Optimum's
  ``prepare_inputs_for_generation``; with a mask of ones this is ``arange(length)``, what a forward without
  ``position_ids`` uses);
- ``token_type_ids``: zeros (a single segment);
- ``past_key_values.N.key/value``: an empty past, (batch, heads, 0, head size), the heads and head size read
  from the input's shape or else the model's ``config.json`` (``num_key_value_heads``, ``head_dim``);
- ``cache_position``: ``arange(length)`` (an empty past starts at 0).

An input no flow can fill (a merged decoder's ``use_cache_branch``, an encoder-decoder's ``encoder_hidden_states``,
an unknown name) is refused naming it: never filled with a guess."""
from __future__ import annotations

import json
import re
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np

from pytrain.base import dtypes
from pytrain.errors import DataError

INT_TYPES = (dtypes.INT32, dtypes.INT64)
FLOAT_TYPES = (dtypes.FLOAT, dtypes.FLOAT16, dtypes.DOUBLE)
#: the inputs an attention mask arrives by
MASK_NAMES = ("attention_mask",)
#: the inputs token ids arrive by, in preference order (an integer input not named here is refused)
IDS_NAMES = ("input_ids", "ids", "tokens", "decoder_input_ids")
POSITION_NAMES = ("position_ids",)
TOKEN_TYPE_NAMES = ("token_type_ids",)
CACHE_POSITION_NAMES = ("cache_position",)
PIXEL_NAMES = ("pixel_values",)
#: Optimum's and transformers.js' names of a layer's cached keys and values
PAST_RE = re.compile(r"^past_key_values\.(\d+)\.(key|value)$")
#: inputs that are known and cannot be filled from a text or an image, with why
REFUSED = {
    "use_cache_branch": "a merged decoder (decoder_model_merged.onnx) switches between two graphs with it; export "
                        "the model with Optimum's default task text-generation-with-past (one graph) instead",
    "encoder_hidden_states": "an encoder-decoder's decoder takes the encoder's output; train the whole model",
    "encoder_attention_mask": "an encoder-decoder's decoder takes the encoder's mask; train the whole model",
    "inputs_embeds": "the model takes embeddings, not token ids; export it with input_ids",
}

Spec = Tuple[str, int, Optional[Sequence[Any]]]


class Role(NamedTuple):
    """What one input is fed: ``kind`` ids / mask / positions / token_types / cache_position / past / pixels;
    ``elem_type`` its ONNX element type; ``heads`` and ``head_size`` of an empty past."""
    name: str
    kind: str
    elem_type: int
    heads: int = 0
    head_size: int = 0

    @property
    def dtype(self) -> Any:
        return dtypes.to_numpy(self.elem_type)


def _type_name(t: int) -> str:
    return str(dtypes.NAMES.get(t, t))


def _dim(shape: Optional[Sequence[Any]], axis: int) -> Optional[int]:
    d = shape[axis] if shape is not None and len(shape) > axis else None
    return int(d) if isinstance(d, int) and not isinstance(d, bool) and d > 0 else None


def past_dims(config: Optional[Dict[str, Any]]) -> Tuple[Optional[int], Optional[int]]:
    """(key/value heads, head size) of a ``config.json``: ``num_key_value_heads`` (grouped-query attention) else
    the attention heads; ``head_dim`` else hidden size / heads. None where the config does not say."""
    if not config:
        return None, None
    cfg = dict(config.get("text_config") or {}, **config) if isinstance(config.get("text_config"), dict) else config
    heads = next((cfg[k] for k in ("num_attention_heads", "n_head", "num_heads") if cfg.get(k)), None)
    kv = cfg.get("num_key_value_heads") or cfg.get("multi_query_group_num") or heads
    if cfg.get("multi_query"):
        kv = 1
    size = cfg.get("head_dim")
    hidden = next((cfg[k] for k in ("hidden_size", "n_embd", "d_model") if cfg.get(k)), None)
    if size is None and hidden and heads:
        size = int(hidden) // int(heads)
    return (int(kv) if kv else None), (int(size) if size else None)


def _past_role(name: str, et: int, shape: Optional[Sequence[Any]], config: Optional[Dict[str, Any]],
               where: str) -> Role:
    if et not in FLOAT_TYPES:
        raise DataError("%s's input %r is %s; a past of keys or values is floating point"
                        % (where, name, _type_name(et)))
    if shape is not None and len(shape) != 4:
        raise DataError("%s's input %r has %d axes; pytrain feeds an empty past as (batch, heads, 0, head size) "
                        "and cannot tell this layout's axes" % (where, name, len(shape)))
    kv, size = past_dims(config)
    heads, head_size = _dim(shape, 1), _dim(shape, 3)
    for got, cfg, what in ((heads, kv, "heads"), (head_size, size, "head size")):
        if got is not None and cfg is not None and got != cfg:
            raise DataError("%s's input %r has %d %s but its config.json says %d" % (where, name, got, what, cfg))
    heads, head_size = heads or kv, head_size or size
    if not heads or not head_size:
        raise DataError("%s's input %r does not fix its heads and head size (shape %s): give the model's config.json "
                        "(num_key_value_heads, head_dim) to feed it an empty past" % (where, name, list(shape or [])))
    return Role(name, "past", et, heads, head_size)


def _role(name: str, et: int, shape: Optional[Sequence[Any]], ids: Optional[str], config: Optional[Dict[str, Any]],
          where: str) -> Role:
    if name in REFUSED:
        raise DataError("%s takes %r, which pytrain cannot feed from a text: %s" % (where, name, REFUSED[name]))
    if PAST_RE.match(name):
        return _past_role(name, et, shape, config, where)
    if name in PIXEL_NAMES and et in FLOAT_TYPES:
        return Role(name, "pixels", et)
    kinds = ((MASK_NAMES, "mask"), (POSITION_NAMES, "positions"), (TOKEN_TYPE_NAMES, "token_types"),
             (CACHE_POSITION_NAMES, "cache_position"))
    for names, kind in kinds:
        if name in names:
            if et not in INT_TYPES:
                raise DataError("%s's input %r is %s; pytrain feeds it integers" % (where, name, _type_name(et)))
            return Role(name, kind, et)
    if name == ids:
        return Role(name, "ids", et)
    raise DataError("%s also takes %r (%s), which pytrain does not know how to fill from a text or images; it feeds %s"
                    % (where, name, _type_name(et), ", ".join(IDS_NAMES[:1] + MASK_NAMES + POSITION_NAMES
                                                              + TOKEN_TYPE_NAMES + CACHE_POSITION_NAMES
                                                              + ("past_key_values.N.key/value",))))


def ids_input(inputs: Sequence[Tuple[str, int]], where: str) -> str:
    """The input taking token ids among (name, ONNX element type) pairs: ``input_ids`` (or another of
    :data:`IDS_NAMES`), else the only integer input no other role claims."""
    known = set(MASK_NAMES + POSITION_NAMES + TOKEN_TYPE_NAMES + CACHE_POSITION_NAMES)
    ints = [n for n, t in inputs if t in INT_TYPES and n not in known]
    named = [n for n in IDS_NAMES if n in ints]
    if named:
        return named[0]
    if len(ints) == 1:
        return ints[0]
    if not ints:
        raise DataError("%s takes no integer input for token ids (inputs: %s); a language model takes input_ids"
                        % (where, ", ".join("%s (%s)" % (n, _type_name(t)) for n, t in inputs)))
    raise DataError("%s takes several integer inputs (%s) and none is input_ids: pytrain cannot tell which takes the "
                    "token ids" % (where, ", ".join(ints)))


class FeedPlan:
    """What a model's inputs are fed for a batch: built by :func:`plan`."""

    def __init__(self, roles: List[Role]) -> None:
        self.roles = roles
        self.names = [r.name for r in roles]
        self.ids = next((r.name for r in roles if r.kind == "ids"), None)
        self.masked = any(r.kind == "mask" for r in roles)
        self.past = [r.name for r in roles if r.kind == "past"]

    def arrays(self, tokens: np.ndarray, mask: Optional[np.ndarray] = None) -> Dict[str, np.ndarray]:
        """The inputs for ``tokens`` (batch, length) and ``mask`` (ones when None), by name."""
        tokens = np.asarray(tokens)
        mask = np.ones_like(tokens, dtype=np.int64) if mask is None else np.asarray(mask, dtype=np.int64)
        n, length = tokens.shape
        out = {}
        for r in self.roles:
            if r.kind == "ids":
                v = tokens
            elif r.kind == "mask":
                v = mask
            elif r.kind == "positions":
                v = positions(mask)
            elif r.kind == "token_types":
                v = np.zeros_like(tokens)
            elif r.kind == "cache_position":
                v = np.arange(length)
            elif r.kind == "past":
                v = np.zeros((n, r.heads, 0, r.head_size))
            else:
                raise DataError("%r takes pixels, not token ids" % r.name)
            out[r.name] = np.ascontiguousarray(v, dtype=r.dtype)
        return out

    def specs(self) -> List[Spec]:
        """The inputs as :func:`plan` takes them, an empty past's heads and size fixed in its shape (what a run
        keeps to feed the model again without its config.json)."""
        return [(r.name, r.elem_type, ["batch", r.heads, "past", r.head_size] if r.kind == "past" else None)
                for r in self.roles]

    def feeder(self, labelled: bool) -> Callable[..., Tuple[np.ndarray, ...]]:
        """:meth:`feeds` for a flow's batches (x, y): the labels follow the inputs when ``labelled`` (a
        classifier's), not for a causal LM (its loss reads the next tokens from its ids)."""
        return lambda xb, yb=None: self.feeds(xb, yb if labelled else None)

    def feeds(self, xb: np.ndarray, yb: Optional[np.ndarray] = None) -> Tuple[np.ndarray, ...]:
        """The inputs in order for a batch ``xb``: ids (N, L), or ids and mask (N, 2, L), or an image model's
        pixels as they are; then the labels ``yb`` when given (a classifier's; a causal LM's loss reads them from
        its ids)."""
        xb = np.asarray(xb)
        if self.ids is None:   # an image model: pixel_values alone (plan refuses any other input)
            by = {r.name: np.ascontiguousarray(xb, dtype=r.dtype) for r in self.roles}
        else:
            by = self.arrays(xb[:, 0], xb[:, 1]) if xb.ndim == 3 else self.arrays(xb)
        out = tuple(by[n] for n in self.names)
        return out + (np.ascontiguousarray(yb, dtype=np.int64),) if yb is not None else out


def positions(mask: np.ndarray) -> np.ndarray:
    """transformers' position ids for an attention mask: ``cumsum(mask) - 1``, 1 where the mask is 0."""
    mask = np.asarray(mask, dtype=np.int64)
    pos = np.cumsum(mask, axis=-1) - 1
    return np.where(mask == 0, 1, pos).astype(np.int64)


def read_config(src: Any, where: str = "the model's config.json") -> Optional[Dict[str, Any]]:
    """A ``config.json`` given as its text, bytes or the dict itself (None: none given)."""
    if src is None or isinstance(src, dict):
        return src
    try:
        cfg = json.loads(bytes(src).decode("utf-8") if isinstance(src, (bytes, bytearray, memoryview)) else str(src))
    except ValueError as e:
        raise DataError("%s is not JSON (%s)" % (where, e)) from None
    if not isinstance(cfg, dict):
        raise DataError("%s holds %s, not an object" % (where, type(cfg).__name__))
    return cfg


def plan(inputs: Sequence[Spec], config: Optional[Dict[str, Any]] = None, where: str = "the model") -> FeedPlan:
    """The feed of a model whose data inputs are ``inputs`` ((name, ONNX element type, shape or None), in order),
    ``config`` its ``config.json`` (read for an empty past's heads and head size when the shapes do not fix them).
    Raises :class:`~pytrain.errors.DataError` naming the first input it cannot fill."""
    inputs = [(str(n), int(t), s) for n, t, s in inputs]
    image = any(n in PIXEL_NAMES for n, _, _ in inputs)
    ids = None if image else ids_input([(n, t) for n, t, _ in inputs], where)
    if image:   # an image model's other inputs (pixel_mask, ...) are not filled from the images alone
        for n, t, _ in inputs:
            if n not in PIXEL_NAMES:
                raise DataError("%s takes %r (%s) beside pixel_values, which pytrain does not fill from images"
                                % (where, n, _type_name(t)))
    return FeedPlan([_role(n, t, s, ids, config, where) for n, t, s in inputs])


def plan_model(model: Any, config: Any = None, where: str = "the model") -> FeedPlan:
    """:func:`plan` for an ONNX model (a pytrain or ``onnx`` ModelProto, or its bytes) and its ``config.json``
    (text, bytes or a dict): its graph inputs that are not initializers, in order. The Python API's way to feed a
    Hub export what the CLI and the page feed it: ``module(*plan_model(m).feeds(ids))``."""
    from pytrain.proto import ModelProto, value_info_type

    if isinstance(model, (bytes, bytearray)):
        model = ModelProto.FromString(bytes(model))
    elif not isinstance(model, ModelProto):   # onnx's own ModelProto
        model = ModelProto.FromString(model.SerializeToString())
    init = {t.name for t in model.graph.initializer}
    specs = [(vi.name,) + tuple(value_info_type(vi)) for vi in model.graph.input if vi.name not in init]
    return plan(specs, read_config(config), where)
