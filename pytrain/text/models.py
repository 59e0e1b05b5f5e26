"""tokenizer.json models: BPE, WordPiece and Unigram, each turning one pre-token into ids exactly as
the Rust ``tokenizers`` crate does (same merge order, same greedy match, same Viterbi tie-breaking)."""
from __future__ import annotations

import heapq
from typing import Any, Dict, List, Optional, Tuple

from pytrain.text._common import fail, field, type_of, unsupported

_UNK_PENALTY = 10.0   # sentencepiece's kUnkPenalty: an unknown character scores min_score - 10


class Model:
    """A vocabulary and how a pre-token becomes ids."""

    def __init__(self, vocab: Dict[str, int]) -> None:
        self.vocab = vocab
        self.tokens = {i: t for t, i in vocab.items()}

    def tokenize(self, word: str) -> List[int]:
        raise NotImplementedError


def _vocab_dict(obj: Dict[str, Any], where: str) -> Dict[str, int]:
    vocab = field(obj, "vocab", where, dict)
    for token, i in vocab.items():
        if not isinstance(i, int) or isinstance(i, bool) or i < 0:
            raise fail(where + ".vocab", "id of {!r} must be a non-negative integer, got {!r}".format(token, i))
    return vocab


def _unk_id(vocab: Dict[str, int], unk: Optional[str], where: str) -> Optional[int]:
    if unk is None:
        return None
    if unk not in vocab:
        raise fail(where + ".unk_token", "{!r} is not in the vocabulary".format(unk))
    return vocab[unk]


def _bytes(vocab: Dict[str, int], text: str) -> Optional[List[int]]:
    """byte_fallback: the ``<0xAB>`` tokens of ``text``'s UTF-8 bytes, None unless all exist."""
    codes = ["<0x%02X>" % b for b in text.encode("utf-8")]
    return [vocab[c] for c in codes] if all(c in vocab for c in codes) else None


class BPE(Model):
    """Byte-pair encoding (GPT-2's with the ByteLevel pre-tokenizer)."""

    def __init__(self, obj: Dict[str, Any], where: str) -> None:
        super().__init__(_vocab_dict(obj, where))
        dropout = field(obj, "dropout", where, (int, float), None)
        if dropout:
            raise fail(where + ".dropout", "BPE dropout {} samples a different tokenization each call; pytrain "
                                           "encodes deterministically only (set it to null)".format(dropout))
        self.unk = _unk_id(self.vocab, field(obj, "unk_token", where, str, None), where)
        self.prefix = field(obj, "continuing_subword_prefix", where, str, None)
        self.suffix = field(obj, "end_of_word_suffix", where, str, None)
        self.fuse_unk = field(obj, "fuse_unk", where, bool, False)
        self.byte_fallback = field(obj, "byte_fallback", where, bool, False)
        self.ignore_merges = field(obj, "ignore_merges", where, bool, False)
        self.merges: Dict[Tuple[int, int], Tuple[int, int]] = {}
        for rank, merge in enumerate(field(obj, "merges", where, list)):
            at = "{}.merges[{}]".format(where, rank)
            if isinstance(merge, str):
                pair = merge.split(" ")
            elif isinstance(merge, list) and all(isinstance(m, str) for m in merge):
                pair = merge
            else:
                raise fail(at, "expected \"a b\" or [a, b], got {!r}".format(merge))
            if len(pair) != 2:
                raise fail(at, "a merge joins two tokens, got {!r}".format(merge))
            a, b = pair
            if self.prefix and b.startswith(self.prefix):
                b_part = b[len(self.prefix):]
            else:
                b_part = b
            for t in (a, b, a + b_part):
                if t not in self.vocab:
                    raise fail(at, "token {!r} of merge {!r} is not in the vocabulary".format(t, merge))
            self.merges[(self.vocab[a], self.vocab[b])] = (rank, self.vocab[a + b_part])
        self.cache: Dict[str, List[int]] = {}

    def _symbols(self, word: str) -> List[int]:
        ids: List[int] = []
        unk: Optional[int] = None   # a pending unknown, fused with the next one when fuse_unk
        for k, c in enumerate(word):
            s = c
            if k and self.prefix:
                s = self.prefix + s
            if k == len(word) - 1 and self.suffix:
                s = s + self.suffix
            if s in self.vocab:
                if unk is not None:
                    ids.append(unk)
                    unk = None
                ids.append(self.vocab[s])
                continue
            fallback = _bytes(self.vocab, s) if self.byte_fallback else None
            if fallback is not None:   # as tokenizers does, a pending unknown stays pending behind these
                ids.extend(fallback)
                continue
            if self.unk is not None:   # without an unk_token tokenizers drops the character
                if unk is not None and not self.fuse_unk:
                    ids.append(unk)
                unk = self.unk
        if unk is not None:
            ids.append(unk)
        return ids

    def _merge(self, ids: List[int]) -> List[int]:
        # tokenizers' Word::merge_all: lowest rank first, then leftmost; linked symbols, stale entries skipped
        n = len(ids)
        sym, nxt, prv, alive = list(ids), list(range(1, n + 1)), list(range(-1, n - 1)), [True] * n
        queue = [(self.merges[p][0], i, self.merges[p][1]) for i, p in enumerate(zip(ids, ids[1:]))
                 if p in self.merges]
        heapq.heapify(queue)
        while queue:
            _, pos, new = heapq.heappop(queue)
            if not alive[pos] or nxt[pos] >= n:
                continue
            right = nxt[pos]
            current = self.merges.get((sym[pos], sym[right]))
            if current is None or current[1] != new:
                continue
            sym[pos], alive[right], nxt[pos] = new, False, nxt[right]
            if nxt[pos] < n:
                prv[nxt[pos]] = pos
            if prv[pos] >= 0:
                m = self.merges.get((sym[prv[pos]], new))
                if m is not None:
                    heapq.heappush(queue, (m[0], prv[pos], m[1]))
            if nxt[pos] < n:
                m = self.merges.get((new, sym[nxt[pos]]))
                if m is not None:
                    heapq.heappush(queue, (m[0], pos, m[1]))
        return [s for s, a in zip(sym, alive) if a]

    def tokenize(self, word: str) -> List[int]:
        if not word:
            return []
        if self.ignore_merges and word in self.vocab:
            return [self.vocab[word]]
        ids = self.cache.get(word)
        if ids is None:
            ids = self._merge(self._symbols(word))
            if len(self.cache) < 100000:
                self.cache[word] = ids
        return list(ids)


class WordPiece(Model):
    """Greedy longest-match-first subwords (BERT's)."""

    def __init__(self, obj: Dict[str, Any], where: str) -> None:
        super().__init__(_vocab_dict(obj, where))
        unk = field(obj, "unk_token", where, str)
        self.unk = _unk_id(self.vocab, unk, where)
        self.prefix = field(obj, "continuing_subword_prefix", where, str, "##")
        self.max_chars = field(obj, "max_input_chars_per_word", where, int, 100)

    def tokenize(self, word: str) -> List[int]:
        if len(word) > self.max_chars:
            return [self.unk]
        out, start = [], 0
        while start < len(word):
            end = len(word)
            while end > start:
                sub = word[start:end] if start == 0 else self.prefix + word[start:end]
                if sub in self.vocab:
                    out.append(self.vocab[sub])
                    break
                end -= 1
            if end == start:   # no piece matches here: the whole word is unknown
                return [self.unk]
            start = end
        return out


class Unigram(Model):
    """SentencePiece's unigram model (T5's): the most probable segmentation (Viterbi)."""

    def __init__(self, obj: Dict[str, Any], where: str) -> None:
        entries = field(obj, "vocab", where, list)
        self.scores: List[float] = []
        vocab: Dict[str, int] = {}
        self.trie: Dict[str, Any] = {}
        for i, entry in enumerate(entries):
            if (not isinstance(entry, list) or len(entry) != 2 or not isinstance(entry[0], str)
                    or not isinstance(entry[1], (int, float)) or isinstance(entry[1], bool)):
                raise fail("{}.vocab[{}]".format(where, i), "expected [piece, score], got {!r}".format(entry))
            vocab[entry[0]] = i   # a repeated piece: the last one wins, as in tokenizers
            self.scores.append(float(entry[1]))
        for piece, i in vocab.items():
            node = self.trie
            for c in piece:
                node = node.setdefault(c, {})
            node[""] = i
        super().__init__(vocab)
        self.tokens = {i: e[0] for i, e in enumerate(entries)}
        self.unk = field(obj, "unk_id", where, int, None)
        if self.unk is not None and not 0 <= self.unk < len(entries):
            raise fail(where + ".unk_id", "{} is outside the vocabulary (size {})".format(self.unk, len(entries)))
        self.byte_fallback = field(obj, "byte_fallback", where, bool, False)
        self.min_score = min(self.scores) if self.scores else 0.0

    def _pieces(self, text: str) -> List[str]:
        n = len(text)
        unk_score = self.min_score - _UNK_PENALTY
        score: List[float] = [0.0] * (n + 1)
        start: List[int] = [-1] * (n + 1)
        ident: List[int] = [0] * (n + 1)
        for i in range(n):
            here = score[i]
            single = False
            node = self.trie
            for j in range(i, n):
                node = node.get(text[j])
                if node is None:
                    break
                if "" in node:
                    cand = self.scores[node[""]] + here
                    if start[j + 1] < 0 or cand > score[j + 1]:
                        score[j + 1], start[j + 1], ident[j + 1] = cand, i, node[""]
                    single = single or j == i
            if not single:
                if self.unk is None:
                    raise fail("model.unk_id", "the text has a character outside the vocabulary ({!r}) and the "
                                               "Unigram model has no unk_id".format(text[i]))
                cand = unk_score + here
                if start[i + 1] < 0 or cand > score[i + 1]:
                    score[i + 1], start[i + 1], ident[i + 1] = cand, i, self.unk
        pieces: List[str] = []
        unknown: List[str] = []   # consecutive unknowns fuse into one piece
        end = n
        while end > 0:
            s = start[end]
            if ident[end] == self.unk:
                unknown.append(text[s:end])
            else:
                if unknown:
                    pieces.append("".join(reversed(unknown)))
                    unknown = []
                pieces.append(text[s:end])
            end = s
        if unknown:
            pieces.append("".join(reversed(unknown)))
        return pieces[::-1]

    def tokenize(self, word: str) -> List[int]:
        out: List[int] = []
        for piece in self._pieces(word):
            if piece in self.vocab:
                out.append(self.vocab[piece])
                continue
            fallback = _bytes(self.vocab, piece) if self.byte_fallback else None
            out.extend(fallback if fallback is not None else [self.unk])
        return out


_MODELS = {"BPE": BPE, "WordPiece": WordPiece, "Unigram": Unigram}


def build_model(obj: Dict[str, Any], where: str = "model") -> Model:
    """The model a tokenizer.json object describes (a missing ``type`` is inferred as tokenizers does)."""
    kind = obj.get("type") if isinstance(obj, dict) else None
    if kind is None and isinstance(obj, dict):
        kind = "BPE" if "merges" in obj else "Unigram" if isinstance(obj.get("vocab"), list) else "WordPiece"
    kind = type_of(dict(obj, type=kind), where)
    if kind not in _MODELS:
        raise unsupported(where, "model", kind, sorted(_MODELS))
    return _MODELS[kind](obj, where)
