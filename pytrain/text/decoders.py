"""tokenizer.json decoders: tokens back to text, as ``tokenizers``' ``decode``."""
from __future__ import annotations

from typing import Any, Callable, Dict, List

from pytrain.text._common import chain, dispatch, field
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


_BUILT: Dict[str, Callable[[Dict[str, Any], str], Decoder]] = {
    "ByteLevel": _byte_level, "WordPiece": _wordpiece, "Metaspace": _metaspace,
    "Sequence": lambda obj, where: chain(build_decoder, obj, where, "decoders"),
}


def build_decoder(obj: Dict[str, Any], where: str = "decoder") -> Decoder:
    """The decoder a tokenizer.json object describes; refuses a type it does not implement."""
    return dispatch(_BUILT, obj, where, "decoder")

