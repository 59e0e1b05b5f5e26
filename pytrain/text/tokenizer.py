"""``Tokenizer``: a Hugging Face ``tokenizer.json`` read in pure Python, encoding text to the same ids
as the ``tokenizers`` package: added tokens split out first, then normalizer, pre-tokenizer, model and
post-processor. A component this reader does not implement is refused when the file is loaded."""
from __future__ import annotations

import json
import os
import unicodedata
from typing import Any, Dict, List, Optional, Tuple, Union

from pytrain.errors import DataError
from pytrain.data._source import read_text
from pytrain.text._common import WHITESPACE, fail, field, optional_component
from pytrain.text.decoders import Decoder, build_decoder
from pytrain.text.hub_config import TokenizerConfig
from pytrain.text.models import Model, build_model
from pytrain.text.normalizers import Normalizer, build_normalizer
from pytrain.text.pretokenizers import Piece, PreTokenizer, build_pre_tokenizer
from pytrain.text.processors import PostProcessor, build_post_processor, plain

Split = Tuple[str, Optional[int], bool]   # (text, id when it is an added token, starts the input)


class _Added:
    """One entry of ``added_tokens``."""

    def __init__(self, obj: Any, where: str) -> None:
        self.id = field(obj, "id", where, int)
        self.content = field(obj, "content", where, str)
        self.single_word = field(obj, "single_word", where, bool, False)
        self.lstrip = field(obj, "lstrip", where, bool, False)
        self.rstrip = field(obj, "rstrip", where, bool, False)
        self.normalized = field(obj, "normalized", where, bool, True)
        self.special = field(obj, "special", where, bool, False)


def _is_word_char(c: str) -> bool:
    return c.isalnum() or c == "_" or unicodedata.category(c)[0] == "M"


class _Matcher:
    """tokenizers' added-token search: leftmost-longest matches, then single_word / lstrip / rstrip."""

    def __init__(self, patterns: List[Tuple[str, _Added]]) -> None:
        self.by_first: Dict[str, List[Tuple[str, _Added]]] = {}
        for text, token in patterns:
            if text:
                self.by_first.setdefault(text[0], []).append((text, token))
        for entries in self.by_first.values():
            entries.sort(key=lambda e: -len(e[0]))   # stable: the first of equal patterns wins

    def split(self, text: str, at_start: bool) -> List[Split]:
        out: List[Split] = []
        done, i, n = 0, 0, len(text)
        while i < n and self.by_first:
            hit = next((e for e in self.by_first.get(text[i], ()) if text.startswith(e[0], i)), None)
            if hit is None:
                i += 1
                continue
            start, stop, token = i, i + len(hit[0]), hit[1]
            i = stop   # a match refused below is still consumed, as the automaton's iterator does
            if token.single_word and ((start and _is_word_char(text[start - 1]))
                                      or (stop < n and _is_word_char(text[stop]))):
                continue
            if token.lstrip:
                while start > done and text[start - 1] in WHITESPACE:
                    start -= 1
            if token.rstrip:
                while stop < n and text[stop] in WHITESPACE:
                    stop += 1
            if done < start:
                out.append((text[done:start], None, at_start and done == 0))
            out.append((text[start:stop], token.id, False))
            done = stop
        if done < n:
            out.append((text[done:], None, at_start and done == 0))
        return out


class Tokenizer:
    """A tokenizer.json: ``encode(text)`` gives the ids the ``tokenizers`` package gives."""

    def __init__(self, config: Dict[str, Any]) -> None:
        if not isinstance(config, dict):
            raise fail("(top level)", "expected an object, got {}".format(type(config).__name__))
        for key in ("truncation", "padding"):
            if config.get(key) is not None:
                raise fail(key, "{} is set; pytrain encodes each text whole (save the tokenizer with "
                                "no_{}() and cut or pad the ids yourself)".format(key, key if key == "padding"
                                                                                 else "truncation"))
        self.model: Model = build_model(field(config, "model", "model", dict), "model")
        norm, pre = optional_component(config, "normalizer"), optional_component(config, "pre_tokenizer")
        post = optional_component(config, "post_processor")
        self.normalizer: Optional[Normalizer] = None if norm is None else build_normalizer(norm)
        self.pre_tokenizer: Optional[PreTokenizer] = None if pre is None else build_pre_tokenizer(pre)
        self.post_processor: PostProcessor = plain if post is None else build_post_processor(post)
        if norm is not None and pre is not None and '"prepend_scheme": "first"' in json.dumps(pre):
            # "first" asks whether a piece starts at offset 0 of the original text, which needs the
            # normalizer's alignments; pytrain does not track them
            raise fail("pre_tokenizer", "Metaspace with prepend_scheme 'first' after a normalizer is not supported "
                                        "(use 'always', or no normalizer)")
        dec = optional_component(config, "decoder")
        self._decoder: Union[Decoder, DataError, None] = None
        if dec is not None:
            try:
                self._decoder = build_decoder(dec)
            except DataError as e:   # encoding works without it; decode() raises this
                self._decoder = e
        self.added: List[_Added] = [_Added(t, "added_tokens[{}]".format(i))
                                    for i, t in enumerate(field(config, "added_tokens", "added_tokens", list, []))]
        for i, token in enumerate(self.added):
            known = self.model.vocab.get(token.content)
            if known is not None and known != token.id:
                raise fail("added_tokens[{}]".format(i), "{!r} has id {} but the model's vocabulary gives it {}"
                           .format(token.content, token.id, known))
        self.config: Optional[TokenizerConfig] = None
        self._index_added()

    def _index_added(self) -> None:
        self.added_ids = {t.id: t for t in self.added}
        self._raw = _Matcher([(t.content, t) for t in self.added if not t.normalized])
        self._normalized = _Matcher([(self.normalize(t.content), t) for t in self.added if t.normalized])

    def with_config(self, config: Union["TokenizerConfig", str, bytes, bytearray]) -> "Tokenizer":
        """This tokenizer with its ``tokenizer_config.json`` (a :class:`TokenizerConfig` or the file's text):
        the special tokens (:attr:`bos_token`, :attr:`eos_token`, ...) and :attr:`chat_template` come from it;
        ``added_tokens_decoder`` entries tokenizer.json lacks are added, as transformers adds them, and one
        giving an id another token is refused. Returns self."""
        if not isinstance(config, TokenizerConfig):
            config = TokenizerConfig.from_json(config)
        for i, entry in sorted(config.added_tokens.items()):
            where = "tokenizer_config.json: added_tokens_decoder.{}".format(i)
            if i in self.added_ids:
                if self.added_ids[i].content != entry["content"]:
                    raise DataError("{}: {!r} but tokenizer.json's added token {} is {!r}".format(
                        where, entry["content"], i, self.added_ids[i].content))
                continue
            known = self.model.vocab.get(entry["content"])
            if known is not None and known != i:
                raise DataError("{}: {!r} has id {} in tokenizer.json's vocabulary".format(where, entry["content"], known))
            self.added.append(_Added(dict(entry, id=i), where))
        self._index_added()
        for name, text in config.special.items():
            if text is not None and self.token_to_id(text) is None:
                raise DataError("tokenizer_config.json: {} {!r} is not a token of tokenizer.json".format(name, text))
        self.config = config
        return self

    def special_token(self, name: str) -> Optional[str]:
        """The text of ``bos_token``, ``eos_token``, ``pad_token``, ``unk_token``, ... from tokenizer_config.json
        (None without one, or when unset there)."""
        return None if self.config is None else self.config.special.get(name)

    def special_token_id(self, name: str) -> Optional[int]:
        """The id of :meth:`special_token`'s token (None when it has none)."""
        text = self.special_token(name)
        return None if text is None else self.token_to_id(text)

    @property
    def bos_token_id(self) -> Optional[int]:
        return self.special_token_id("bos_token")

    @property
    def eos_token_id(self) -> Optional[int]:
        return self.special_token_id("eos_token")

    @property
    def pad_token_id(self) -> Optional[int]:
        return self.special_token_id("pad_token")

    @property
    def chat_template(self) -> Optional[str]:
        """tokenizer_config.json's default Jinja chat template, as a string: pytrain does not render it."""
        return None if self.config is None else self.config.chat_template

    @classmethod
    def from_json(cls, text: Union[str, bytes, bytearray]) -> "Tokenizer":
        """A tokenizer from the text (or UTF-8 bytes) of a tokenizer.json."""
        try:
            config = json.loads(text.decode("utf-8") if isinstance(text, (bytes, bytearray)) else text)
        except (ValueError, UnicodeDecodeError) as e:
            raise DataError("tokenizer.json is not valid JSON: {}".format(e)) from None
        return cls(config)

    @classmethod
    def from_file(cls, path: Any) -> "Tokenizer":
        """A tokenizer from a tokenizer.json file."""
        return cls.from_json(read_text(path, None, "tokenizer.json")[0])

    @classmethod
    def from_folder(cls, path: Any) -> "Tokenizer":
        """A Hub model folder's tokenizer: its tokenizer.json, with its tokenizer_config.json and
        chat_template.jinja when there (:meth:`with_config`)."""
        folder = os.fspath(path)
        tok = cls.from_file(os.path.join(folder, "tokenizer.json"))
        config = os.path.join(folder, "tokenizer_config.json")
        jinja = os.path.join(folder, "chat_template.jinja")
        template = read_text(jinja, None, "chat_template.jinja")[0] if os.path.isfile(jinja) else None
        if os.path.isfile(config) or template is not None:
            text = read_text(config, None, "tokenizer_config.json")[0] if os.path.isfile(config) else "{}"
            tok.with_config(TokenizerConfig.from_json(text, template))
        return tok

    def normalize(self, text: str) -> str:
        """The text after the normalizer."""
        return text if self.normalizer is None else self.normalizer(text)

    def _ids(self, text: str) -> List[int]:
        ids: List[int] = []
        for raw, raw_id, raw_start in self._raw.split(text, True):
            if raw_id is not None:
                ids.append(raw_id)
                continue
            for part, part_id, at_start in self._normalized.split(self.normalize(raw), raw_start):
                if part_id is not None:
                    ids.append(part_id)
                    continue
                pieces: List[Piece] = [(part, at_start)]
                if self.pre_tokenizer is not None:
                    pieces = self.pre_tokenizer(pieces)
                for piece, _ in pieces:
                    ids.extend(self.model.tokenize(piece))
        return ids

    def encode(self, text: str, pair: Optional[str] = None, add_special_tokens: bool = True) -> List[int]:
        """The ids of ``text`` (and ``pair``), with the post-processor's special tokens unless told not to."""
        for name, value in (("text", text), ("pair", pair)):
            if value is not None and not isinstance(value, str):
                raise DataError("Tokenizer.encode: {} must be a str, got {}".format(name, type(value).__name__))
        a = self._ids(text)
        b = None if pair is None else self._ids(pair)
        return self.post_processor(a, b) if add_special_tokens else plain(a, b)

    def id_to_token(self, i: int) -> Optional[str]:
        """The token of id ``i`` (an added token or the model's), None when there is none."""
        added = self.added_ids.get(i)
        return added.content if added is not None else self.model.tokens.get(i)

    def token_to_id(self, token: str) -> Optional[int]:
        """The id of ``token`` (an added token first, as tokenizers looks it up), None when there is none."""
        for t in self.added:
            if t.content == token:
                return t.id
        return self.model.vocab.get(token)

    def decode(self, ids: List[int], skip_special_tokens: bool = True) -> str:
        """The text of ``ids`` as the tokenizer's decoder writes it."""
        if isinstance(self._decoder, DataError):
            raise self._decoder
        special = {t.content for t in self.added if t.special}
        tokens = []
        for i in ids:
            token = self.id_to_token(int(i))
            if token is None:
                raise DataError("Tokenizer.decode: id {} is not in the vocabulary (size {})".format(
                    i, self.vocab_size))
            if not (skip_special_tokens and token in special):
                tokens.append(token)
        return "".join(self._decoder(tokens)) if self._decoder is not None else " ".join(tokens)

    @property
    def vocab_size(self) -> int:
        """The number of ids, added tokens included."""
        return len(set(self.model.tokens) | set(self.added_ids))
