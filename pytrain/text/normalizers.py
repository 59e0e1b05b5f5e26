"""tokenizer.json normalizers: each becomes a function from text to normalized text. Unicode tables
come from Python's ``unicodedata``, so characters assigned after the interpreter's Unicode version
(12.1 in Pyodide 0.17) normalize as unassigned ones."""
from __future__ import annotations

import re
import unicodedata
from typing import Any, Callable, Dict, List, Tuple

from pytrain.text._common import (WHITESPACE, chain, fail, field, is_control, is_mark, is_nonspacing_mark,
                                  type_of, unsupported)
from pytrain.text._onig import compile_onig, find_iter

Normalizer = Callable[[str], str]

_CHINESE = ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F), (0x2B740, 0x2B81F),
            (0x2B920, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F))
# Nmt: control characters dropped, other separators become a space (tokenizers' normalizers/unicode.rs).
_NMT_DROP = frozenset(list(range(0x01, 0x09)) + [0x0B] + list(range(0x0E, 0x20)) + [0x7F, 0x8F, 0x9F])
_NMT_SPACE = frozenset([0x09, 0x0A, 0x0C, 0x0D, 0x1680, 0x200B, 0x200C, 0x200D, 0x200E, 0x200F, 0x2028, 0x2029,
                        0x2581, 0xFEFF, 0xFFFD])


def _is_chinese(c: str) -> bool:
    cp = ord(c)
    return any(lo <= cp <= hi for lo, hi in _CHINESE)


def lowercase(text: str) -> str:
    # per character, as Rust's char::to_lowercase: no final-sigma rule (str.lower() has one)
    return "".join(c.lower() for c in text)


def strip_accents(text: str) -> str:
    """The StripAccents normalizer: drops marks (tokenizers' files put it after NFD)."""
    return "".join(c for c in text if not is_mark(c))


def _bert(obj: Dict[str, Any], where: str) -> Normalizer:
    clean = field(obj, "clean_text", where, bool, True)
    chinese = field(obj, "handle_chinese_chars", where, bool, True)
    lower = field(obj, "lowercase", where, bool, True)
    strip = field(obj, "strip_accents", where, bool, lower)

    def run(text: str) -> str:
        if clean:
            text = "".join(" " if c in WHITESPACE else c for c in text
                           if not (c == "\x00" or c == "\ufffd" or is_control(c)))
        if chinese:
            text = "".join(" " + c + " " if _is_chinese(c) else c for c in text)
        if strip:
            text = "".join(c for c in unicodedata.normalize("NFD", text) if not is_nonspacing_mark(c))
        if lower:
            text = lowercase(text)
        return text
    return run


def _nmt(text: str) -> str:
    return "".join(" " if ord(c) in _NMT_SPACE else c for c in text if ord(c) not in _NMT_DROP)


class Pattern:
    """A tokenizer.json ``{"String": s}`` or ``{"Regex": r}`` pattern: ``spans(text)`` are its matches as the
    ``tokenizers`` package finds them (a regex through :mod:`pytrain.text._onig`)."""

    def __init__(self, obj: Dict[str, Any], where: str) -> None:
        if not isinstance(obj, dict) or len(obj) != 1 or not isinstance(next(iter(obj.values())), str):
            raise fail(where, 'expected {"String": ...} or {"Regex": ...}, got %r' % (obj,))
        kind, pattern = next(iter(obj.items()))
        if kind not in ("String", "Regex"):
            raise fail(where, "unknown pattern kind {!r} (expected String or Regex)".format(kind))
        self.empty = pattern == ""   # an empty String matches nothing
        self.regex = re.compile(re.escape(pattern)) if kind == "String" else compile_onig(pattern, where)

    def spans(self, text: str) -> List[Tuple[int, int]]:
        """(start, end) of every match, empty ones included (none in an empty text, as in tokenizers)."""
        return [] if self.empty or not text else list(find_iter(self.regex, text))

    def replace(self, text: str, content: str) -> str:
        out, done = [], 0
        for start, end in self.spans(text):
            out.append(text[done:start] + content)
            done = end
        return "".join(out) + text[done:]


def _replace(obj: Dict[str, Any], where: str) -> Normalizer:
    pattern = Pattern(field(obj, "pattern", where, dict), where + ".pattern")
    content = field(obj, "content", where, str)
    return lambda text: pattern.replace(text, content)


def _strip(obj: Dict[str, Any], where: str) -> Normalizer:
    left = field(obj, "strip_left", where, bool, False)
    right = field(obj, "strip_right", where, bool, False)
    chars = "".join(sorted(WHITESPACE))

    def run(text: str) -> str:
        text = text.lstrip(chars) if left else text
        return text.rstrip(chars) if right else text
    return run


def _prepend(obj: Dict[str, Any], where: str) -> Normalizer:
    prefix = field(obj, "prepend", where, str)
    return lambda text: prefix + text if text else text


def _unicode_form(form: str) -> Normalizer:
    return lambda text: unicodedata.normalize(form, text)


_SIMPLE: Dict[str, Normalizer] = {
    "NFC": _unicode_form("NFC"), "NFD": _unicode_form("NFD"), "NFKC": _unicode_form("NFKC"),
    "NFKD": _unicode_form("NFKD"), "Lowercase": lowercase, "StripAccents": strip_accents, "Nmt": _nmt,
}
_BUILT: Dict[str, Callable[[Dict[str, Any], str], Normalizer]] = {
    "BertNormalizer": _bert, "Replace": _replace, "Strip": _strip, "Prepend": _prepend,
    "Sequence": lambda obj, where: chain(build_normalizer, obj, where, "normalizers"),
}


def build_normalizer(obj: Dict[str, Any], where: str = "normalizer") -> Normalizer:
    """The normalizer a tokenizer.json object describes; refuses a type it does not implement."""
    kind = type_of(obj, where)
    if kind in _SIMPLE:
        return _SIMPLE[kind]
    if kind in _BUILT:
        return _BUILT[kind](obj, where)
    names: List[str] = sorted(list(_SIMPLE) + list(_BUILT))
    if kind == "Precompiled":
        raise fail(where, "normalizer 'Precompiled' (SentencePiece's precompiled_charsmap, as in T5's "
                          "tokenizer.json) is not supported: it normalizes by grapheme clusters, which Python's "
                          "standard library cannot segment; supported: " + ", ".join(names))
    raise unsupported(where, "normalizer", kind, names)
