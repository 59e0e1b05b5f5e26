"""tokenizer.json post-processors: the special tokens added around one sequence or a pair
(``[CLS] A [SEP] B [SEP]``, ``A </s>``)."""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Tuple

from pytrain.text._common import dispatch, fail, field

#: (ids of A, ids of B or None) -> ids with the special tokens
PostProcessor = Callable[[List[int], Optional[List[int]]], List[int]]


def _token_pair(obj: Dict[str, Any], key: str, where: str) -> int:
    value = field(obj, key, where, list)
    if len(value) != 2 or not isinstance(value[0], str) or not isinstance(value[1], int):
        raise fail("{}.{}".format(where, key), "expected [token, id], got {!r}".format(value))
    return value[1]


def _bert(obj: Dict[str, Any], where: str) -> PostProcessor:
    cls, sep = _token_pair(obj, "cls", where), _token_pair(obj, "sep", where)
    return lambda a, b: [cls] + a + [sep] + ([] if b is None else b + [sep])


def _roberta(obj: Dict[str, Any], where: str) -> PostProcessor:
    cls, sep = _token_pair(obj, "cls", where), _token_pair(obj, "sep", where)
    return lambda a, b: [cls] + a + [sep] + ([] if b is None else [sep] + b + [sep])


def _template_part(part: Any, where: str, specials: Dict[str, List[int]]) -> Tuple[str, Any]:
    if not isinstance(part, dict) or len(part) != 1:
        raise fail(where, "expected {\"SpecialToken\": ...} or {\"Sequence\": ...}, got %r" % (part,))
    kind, body = next(iter(part.items()))
    name = field(body, "id", where + "." + kind, str)
    if kind == "Sequence":
        if name not in ("A", "B"):
            raise fail(where + ".Sequence.id", "expected A or B, got {!r}".format(name))
        return "seq", name
    if kind == "SpecialToken":
        if name not in specials:
            raise fail(where + ".SpecialToken.id", "{!r} is not in special_tokens".format(name))
        return "ids", specials[name]
    raise fail(where, "unknown template piece {!r}".format(kind))


def _template(obj: Dict[str, Any], where: str) -> PostProcessor:
    specials = {}
    for name, spec in field(obj, "special_tokens", where, dict, {}).items():
        ids = field(spec, "ids", "{}.special_tokens.{}".format(where, name), list)
        if not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
            raise fail("{}.special_tokens.{}.ids".format(where, name), "expected integers, got {!r}".format(ids))
        specials[name] = ids
    single = [_template_part(p, "{}.single[{}]".format(where, i), specials)
              for i, p in enumerate(field(obj, "single", where, list))]
    pair = [_template_part(p, "{}.pair[{}]".format(where, i), specials)
            for i, p in enumerate(field(obj, "pair", where, list))]

    def run(a: List[int], b: Optional[List[int]]) -> List[int]:
        out: List[int] = []
        for kind, value in single if b is None else pair:
            if kind == "ids":
                out.extend(value)
            elif value == "A":
                out.extend(a)
            elif b is not None:
                out.extend(b)
        return out
    return run


def _sequence(obj: Dict[str, Any], where: str) -> PostProcessor:
    parts = [build_post_processor(p, "{}.processors[{}]".format(where, i))
             for i, p in enumerate(field(obj, "processors", where, list))]

    def run(a: List[int], b: Optional[List[int]]) -> List[int]:
        for part in parts:
            if part is not _keep:   # ByteLevel keeps a pair a pair for the next processor
                a, b = part(a, b), None
        return plain(a, b)
    return run


def plain(a: List[int], b: Optional[List[int]]) -> List[int]:
    """No special tokens: the pair concatenated."""
    return a + (b or [])


def _keep(a: List[int], b: Optional[List[int]]) -> List[int]:
    return plain(a, b)


_BUILT: Dict[str, Callable[[Dict[str, Any], str], PostProcessor]] = {
    "TemplateProcessing": _template, "BertProcessing": _bert, "RobertaProcessing": _roberta,
    "ByteLevel": lambda obj, where: _keep,   # it only trims offsets
    "Sequence": _sequence,
}


def build_post_processor(obj: Dict[str, Any], where: str = "post_processor") -> PostProcessor:
    """The post-processor a tokenizer.json object describes; refuses a type it does not implement."""
    return dispatch(_BUILT, obj, where, "post-processor")
