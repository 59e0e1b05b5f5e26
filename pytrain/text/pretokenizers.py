"""tokenizer.json pre-tokenizers: each turns a list of pieces into a finer list. A piece is its text and
whether it starts the input (Metaspace's ``prepend_scheme: "first"`` needs to know)."""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Tuple

from pytrain.text._common import WHITESPACE, chain, dispatch, fail, field, is_number, is_punctuation
from pytrain.text._onig import compile_onig, find_iter
from pytrain.text.normalizers import Pattern

Piece = Tuple[str, bool]
PreTokenizer = Callable[[List[Piece]], List[Piece]]
Span = Tuple[int, int, bool]   # (start, end, is a match of the pattern)

_BEHAVIORS = ("Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous")


def _bytes_to_unicode() -> Dict[int, str]:
    """GPT-2's printable stand-in for each byte value."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


BYTE_CHAR = _bytes_to_unicode()
CHAR_BYTE = {c: b for b, c in BYTE_CHAR.items()}


#: ByteLevel's own pattern (GPT-2's), under the same Unicode tables as every other tokenizer.json regex
GPT2_PATTERN = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"


def gpt2_split(text: str) -> List[str]:
    """``text`` split by :data:`GPT2_PATTERN` as ``tokenizers``' ByteLevel splits it (the pattern matches
    every character, so the matches are the pieces)."""
    regex = compile_onig(GPT2_PATTERN, "pre_tokenizer.ByteLevel")
    return [text[s:e] for s, e in find_iter(regex, text) if e > s]


def _split(text: str, spans: List[Span], behavior: str) -> List[Tuple[int, int]]:
    """tokenizers' ``NormalizedString::split``: ``spans`` cover ``text``; pieces as (start, end)."""
    acc: List[List[int]] = []
    if behavior == "Removed":
        return [(s, e) for s, e, m in spans if not m]
    if behavior == "Isolated":
        return [(s, e) for s, e, _ in spans]
    previous = False
    if behavior == "MergedWithNext":
        for s, e, m in reversed(spans):
            if m and not previous and acc:
                acc[-1][0] = s
            else:
                acc.append([s, e])
            previous = m
        return [(s, e) for s, e in reversed(acc)]
    for s, e, m in spans:
        merge = (m and not previous) if behavior == "MergedWithPrevious" else m == previous
        if merge and acc:
            acc[-1][1] = e
        else:
            acc.append([s, e])
        previous = m
    return [(s, e) for s, e in acc]


def _char_spans(text: str, pred: Callable[[str], bool]) -> List[Span]:
    """Every character satisfying ``pred`` a match of its own, the runs between them gaps."""
    spans, prev = [], 0
    for i, c in enumerate(text):
        if pred(c):
            if prev != i:
                spans.append((prev, i, False))
            spans.append((i, i + 1, True))
            prev = i + 1
    if prev != len(text):
        spans.append((prev, len(text), False))
    return spans


def _apply(pieces: List[Piece], cut: Callable[[str], List[Tuple[int, int]]]) -> List[Piece]:
    out = []
    for text, at_start in pieces:
        out.extend((text[s:e], at_start and s == 0) for s, e in cut(text) if e > s)
    return out


def _by_chars(pred: Callable[[str], bool], behavior: str) -> PreTokenizer:
    return lambda pieces: _apply(pieces, lambda t: _split(t, _char_spans(t, pred), behavior))


def _behavior(obj: Dict[str, Any], where: str, default: str) -> str:
    behavior = field(obj, "behavior", where, str, default)
    if behavior not in _BEHAVIORS:
        raise fail(where + ".behavior", "unknown behavior {!r} (expected one of {})".format(
            behavior, ", ".join(_BEHAVIORS)))
    return behavior


def byte_level_map(text: str) -> str:
    return "".join(BYTE_CHAR[b] for b in text.encode("utf-8"))


def _byte_level(obj: Dict[str, Any], where: str) -> PreTokenizer:
    prefix = field(obj, "add_prefix_space", where, bool, True)
    use_regex = field(obj, "use_regex", where, bool, True)

    def run(pieces: List[Piece]) -> List[Piece]:
        out = []
        for text, at_start in pieces:
            if prefix and text and not text.startswith(" "):
                text = " " + text
            parts = gpt2_split(text) if use_regex else [text]
            out.extend((byte_level_map(p), at_start and k == 0) for k, p in enumerate(parts) if p)
        return out
    return run


def _bert(obj: Dict[str, Any], where: str) -> PreTokenizer:
    spaces, punct = _by_chars(WHITESPACE.__contains__, "Removed"), _by_chars(is_punctuation, "Isolated")
    return lambda pieces: punct(spaces(pieces))


def _metaspace(obj: Dict[str, Any], where: str) -> PreTokenizer:
    rep = field(obj, "replacement", where, str)
    if len(rep) != 1:
        raise fail(where + ".replacement", "expected one character, got {!r}".format(rep))
    if "prepend_scheme" in obj:
        scheme = field(obj, "prepend_scheme", where, str)
        if scheme not in ("always", "first", "never"):
            raise fail(where + ".prepend_scheme", "expected always, first or never, got {!r}".format(scheme))
    else:   # the format before tokenizers 0.14
        scheme = "always" if field(obj, "add_prefix_space", where, bool, True) else "never"
    split = field(obj, "split", where, bool, True)

    def run(pieces: List[Piece]) -> List[Piece]:
        out: List[Piece] = []
        for text, at_start in pieces:
            text = text.replace(" ", rep)
            if text and not text.startswith(rep) and (scheme == "always" or (scheme == "first" and at_start)):
                text = rep + text
            if split:
                spans = _char_spans(text, rep.__eq__)
                out.extend((text[s:e], at_start and s == 0) for s, e in _split(text, spans, "MergedWithNext")
                           if e > s)
            elif text:
                out.append((text, at_start))
        return out
    return run


def _split_pattern(obj: Dict[str, Any], where: str) -> PreTokenizer:
    pattern = Pattern(field(obj, "pattern", where, dict), where + ".pattern")
    behavior = _behavior(obj, where, "Isolated")
    invert = field(obj, "invert", where, bool, False)

    def spans(text: str) -> List[Span]:
        out, prev = [], 0
        for start, end in pattern.spans(text):
            if prev != start:
                out.append((prev, start, invert))
            out.append((start, end, not invert))
            prev = end
        if prev != len(text) or not text:
            out.append((prev, len(text), invert))
        return out
    return lambda pieces: _apply(pieces, lambda t: _split(t, spans(t), behavior))


def _digits(obj: Dict[str, Any], where: str) -> PreTokenizer:
    individual = field(obj, "individual_digits", where, bool, False)
    return _by_chars(is_number, "Isolated" if individual else "Contiguous")


_BUILT: Dict[str, Callable[[Dict[str, Any], str], PreTokenizer]] = {
    "ByteLevel": _byte_level, "BertPreTokenizer": _bert, "Metaspace": _metaspace, "Split": _split_pattern,
    "Digits": _digits, "Sequence": lambda obj, where: chain(build_pre_tokenizer, obj, where, "pretokenizers"),
    "WhitespaceSplit": lambda obj, where: _by_chars(WHITESPACE.__contains__, "Removed"),
    "Punctuation": lambda obj, where: _by_chars(is_punctuation, _behavior(obj, where, "Isolated")),
}


def build_pre_tokenizer(obj: Dict[str, Any], where: str = "pre_tokenizer") -> PreTokenizer:
    """The pre-tokenizer a tokenizer.json object describes; refuses a type it does not implement."""
    return dispatch(_BUILT, obj, where, "pre-tokenizer")
