"""What every part of the tokenizer.json reader shares: checked access to the JSON (errors name the
path of the field, e.g. ``model.vocab``) and the Unicode character classes the Rust ``tokenizers``
crate uses, which differ from Python's ``str`` predicates."""
from __future__ import annotations

import bisect
import unicodedata
from typing import Any, Dict, List, Optional

from pytrain.errors import DataError
from pytrain.text._unicode_diff import (CONTROL_ALSO, CONTROL_NOT, MARK_ALSO, MARK_NOT, MN_ALSO, MN_NOT, PUNCT_ALSO,
                                        PUNCT_NOT, Ranges)
from pytrain.text._onig import categories

#: Unicode's White_Space property: Rust's ``char::is_whitespace`` and Oniguruma's ``\s``. Python's
#: ``str.isspace`` also accepts U+001C..U+001F, which would split words the Rust side keeps whole.
WHITESPACE = frozenset("\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006"
                       "\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000")


def fail(where: str, message: str) -> DataError:
    """The error for a bad tokenizer.json: ``where`` is the JSON path of the offending field."""
    return DataError("tokenizer.json: {}: {}".format(where, message))


def unsupported(where: str, kind: str, name: Any, supported: List[str]) -> DataError:
    """The error for a component this reader does not implement (refused rather than approximated)."""
    return fail(where, "{} {!r} is not supported (pytrain implements {}); refusing it rather than "
                       "tokenizing differently from Hugging Face tokenizers".format(kind, name, ", ".join(supported)))


def field(obj: Dict[str, Any], key: str, where: str, kind: Any = None, default: Any = ...) -> Any:
    """``obj[key]`` checked to be of ``kind`` (a type or tuple of types); ``default`` when missing or null."""
    if not isinstance(obj, dict):
        raise fail(where, "expected an object, got {}".format(type(obj).__name__))
    value = obj.get(key)
    if value is None:
        if default is ...:
            raise fail(where, "missing field {!r}".format(key))
        return default
    if kind is not None and (not isinstance(value, kind) or (isinstance(value, bool) and kind in (int, float))):
        raise fail("{}.{}".format(where, key), "expected {}, got {!r}".format(_kind_name(kind), value))
    return value


def _kind_name(kind: Any) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    names = {dict: "an object", list: "a list", str: "a string", bool: "true or false", int: "an integer",
             float: "a number"}
    return " or ".join(names.get(k, k.__name__) for k in kinds)


def type_of(obj: Any, where: str) -> str:
    """The ``"type"`` of a component object."""
    return field(obj, "type", where, str)


def dispatch(table: Dict[str, Any], obj: Dict[str, Any], where: str, kind: str) -> Any:
    """The component ``table[obj["type"]](obj, where)``; a type missing from ``table`` is refused."""
    name = type_of(obj, where)
    if name not in table:
        raise unsupported(where, kind, name, sorted(table))
    return table[name](obj, where)


def chain(build: Any, obj: Dict[str, Any], where: str, key: str) -> Any:
    """A ``Sequence`` component: the components listed under ``key``, each applied to the last one's result."""
    parts = [build(p, "{}.{}[{}]".format(where, key, i)) for i, p in enumerate(field(obj, key, where, list))]

    def run(value: Any) -> Any:
        for part in parts:
            value = part(value)
        return value
    return run


def optional_component(obj: Dict[str, Any], key: str) -> Optional[Dict[str, Any]]:
    """A component that may be null (``normalizer``, ``pre_tokenizer``, ...)."""
    return field(obj, key, key, dict, None)


_NUMBER: List[Any] = []


def is_number(c: str) -> bool:
    """Rust's ``char::is_numeric`` (the Digits pre-tokenizer): N*, from the Unicode 16 tables Rust and
    tokenizers' Oniguruma share (``unicodedata`` is older)."""
    if not _NUMBER:
        _NUMBER.append(_within(tuple(categories()["N"])))
    return bool(_NUMBER[0](c))


def _within(ranges: Ranges) -> "Any":
    starts = [a for a, _ in ranges]

    def test(c: str) -> bool:
        k = bisect.bisect_right(starts, ord(c)) - 1
        return k >= 0 and ord(c) <= ranges[k][1]
    return test


def _as_tokenizers(python: Any, no: Ranges, also: Ranges) -> Any:
    """``python``'s predicate corrected to the older Unicode tables the Rust crate classes with."""
    is_no, is_also = _within(no), _within(also)
    return lambda c: (python(c) and not is_no(c)) or is_also(c)


#: ``tokenizers``' BERT punctuation: ASCII punctuation (``$+<=>^`|~`` included) or Unicode ``P*``
is_punctuation = _as_tokenizers(
    lambda c: (c < "\x7f" and not c.isalnum() and c.isprintable() and c != " ") or unicodedata.category(c)[0] == "P",
    PUNCT_NOT, PUNCT_ALSO)
#: BERT clean_text's control characters (tab, newline and return are whitespace instead)
is_control = _as_tokenizers(lambda c: c not in "\t\n\r" and unicodedata.category(c) in ("Cc", "Cf", "Co"),
                            CONTROL_NOT, CONTROL_ALSO)
#: BertNormalizer's strip_accents: nonspacing marks
is_nonspacing_mark = _as_tokenizers(lambda c: unicodedata.category(c) == "Mn", MN_NOT, MN_ALSO)
#: the StripAccents normalizer: any mark
is_mark = _as_tokenizers(lambda c: unicodedata.category(c)[0] == "M", MARK_NOT, MARK_ALSO)
