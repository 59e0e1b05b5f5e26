"""tokenizer.json decoders: tokens back to text, as ``tokenizers``' ``decode``."""
from __future__ import annotations

import re
from typing import Any, Callable, Dict, List, Optional

from pytrain.text._common import chain, dispatch, fail, field
from pytrain.text.normalizers import Pattern
from pytrain.text.pretokenizers import CHAR_BYTE

Decoder = Callable[[List[str]], List[str]]

_CLEANUP = ((" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"), (" n't", "n't"), (" 'm", "'m"),
            (" do not", " don't"), (" 's", "'s"), (" 've", "'ve"), (" 're", "'re"))


def _cleanup(text: str) -> str:
    for a, b in _CLEANUP:
        text = text.replace(a, b)
    return text


def _byte_level(obj: Dict[str, Any], where: str) -> Decoder:
    def run(tokens: List[str]) -> List[str]:
        data = bytearray()
        for t in tokens:
            # a token with a character outside the byte alphabet (an added token) goes in as UTF-8
            data.extend(bytes(CHAR_BYTE[c] for c in t) if all(c in CHAR_BYTE for c in t) else t.encode("utf-8"))
        return [data.decode("utf-8", "replace")]
    return run


def _wordpiece(obj: Dict[str, Any], where: str) -> Decoder:
    prefix = field(obj, "prefix", where, str, "##")
    cleanup = field(obj, "cleanup", where, bool, True)

    def run(tokens: List[str]) -> List[str]:
        out = []
        for i, t in enumerate(tokens):
            if i:
                t = t.replace(prefix, "", 1) if t.startswith(prefix) else " " + t
            out.append(_cleanup(t) if cleanup else t)
        return out
    return run


def _metaspace(obj: Dict[str, Any], where: str) -> Decoder:
    rep = field(obj, "replacement", where, str)
    if "prepend_scheme" in obj:
        prepend = field(obj, "prepend_scheme", where, str) != "never"
    else:
        prepend = field(obj, "add_prefix_space", where, bool, True)

    def run(tokens: List[str]) -> List[str]:
        return [t.replace(rep, "" if i == 0 and prepend else " ") for i, t in enumerate(tokens)]
    return run


def _replace(obj: Dict[str, Any], where: str) -> Decoder:
    pattern = Pattern(field(obj, "pattern", where, dict), where + ".pattern")
    content = field(obj, "content", where, str)
    return lambda tokens: [pattern.replace(t, content) for t in tokens]


def _byte_of(token: str) -> Optional[int]:
    """The byte a ``<0xAB>`` token stands for (Rust's ``u8::from_str_radix`` also takes ``+F``)."""
    if len(token.encode("utf-8")) == 6 and token.startswith("<0x") and token.endswith(">"):
        if re.match(r"\+?[0-9A-Fa-f]+\Z", token[3:5]):
            return int(token[3:5], 16)
    return None


def _byte_fallback(obj: Dict[str, Any], where: str) -> Decoder:
    def flush(data: bytearray, out: List[str]) -> None:
        if data:
            try:
                out.append(data.decode("utf-8"))
            except UnicodeDecodeError:   # tokenizers writes one U+FFFD per byte of an invalid run
                out.extend("\ufffd" * len(data))
            data.clear()

    def run(tokens: List[str]) -> List[str]:
        out: List[str] = []
        data = bytearray()
        for t in tokens:
            b = _byte_of(t)
            if b is not None:
                data.append(b)
                continue
            flush(data, out)
            out.append(t)
        flush(data, out)
        return out
    return run


def _strip(obj: Dict[str, Any], where: str) -> Decoder:
    content = field(obj, "content", where, str)
    start, stop = field(obj, "start", where, int, 0), field(obj, "stop", where, int, 0)
    if len(content) != 1:
        raise fail(where + ".content", "expected one character, got {!r}".format(content))

    def one(token: str) -> str:
        head = 0
        while head < min(start, len(token)) and token[head] == content:
            head += 1
        tail = len(token)
        while len(token) - tail < stop and tail > head and token[tail - 1] == content:
            tail -= 1
        return token[head:tail]
    return lambda tokens: [one(t) for t in tokens]


_BUILT: Dict[str, Callable[[Dict[str, Any], str], Decoder]] = {
    "ByteLevel": _byte_level, "WordPiece": _wordpiece, "Metaspace": _metaspace, "Replace": _replace,
    "ByteFallback": _byte_fallback, "Strip": _strip, "Fuse": lambda obj, where: lambda tokens: ["".join(tokens)],
    "Sequence": lambda obj, where: chain(build_decoder, obj, where, "decoders"),
}


def build_decoder(obj: Dict[str, Any], where: str = "decoder") -> Decoder:
    """The decoder a tokenizer.json object describes; refuses a type it does not implement."""
    return dispatch(_BUILT, obj, where, "decoder")

