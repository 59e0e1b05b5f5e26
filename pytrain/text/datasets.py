"""Text as a language model trains on it: a text file cut into blocks of token ids for a causal LM
(:func:`lm_blocks`), and a CSV of texts and labels as padded ids, attention mask and label indices for
a classifier (:func:`classification_rows`), both through :class:`pytrain.text.Tokenizer`. Ids the model
cannot take (beyond its vocabulary) are refused, naming the id, its token and the vocabulary size."""
from __future__ import annotations

from typing import List, NamedTuple, Optional, Sequence

import numpy as np

from pytrain.data.tabular import read_rows, sniff_delimiter
from pytrain.errors import DataError
from pytrain.text.tokenizer import Tokenizer

#: tokens a tokenizer pads with, most usual first (else id 0)
PAD_TOKENS = ("[PAD]", "<pad>", "<|endoftext|>", "</s>", "<unk>")


def pad_id(tokenizer: Tokenizer) -> int:
    """The id classification rows are padded with: the first of :data:`PAD_TOKENS` the tokenizer has, else 0."""
    for token in PAD_TOKENS:
        i = tokenizer.token_to_id(token)
        if i is not None:
            return int(i)
    return 0


def check_vocabulary(ids: np.ndarray, vocab_size: Optional[int], tokenizer: Tokenizer, where: str) -> None:
    """Refuse ids the model's embedding has no row for."""
    if vocab_size is None or not ids.size or int(ids.max()) < int(vocab_size):
        return
    bad = int(ids.max())
    raise DataError("{}: the tokenizer gives id {} (token {!r}) but the model's vocabulary has {} ids (0-{}); "
                    "use the tokenizer.json that came with the model".format(
                        where, bad, tokenizer.id_to_token(bad), int(vocab_size), int(vocab_size) - 1))


def lm_blocks(tokenizer: Tokenizer, text: str, block_size: int, vocab_size: Optional[int] = None,
              name: str = "the text file") -> np.ndarray:
    """``text`` as consecutive, non-overlapping blocks of ``block_size`` token ids (int64, shape
    (blocks, block_size)), encoded without special tokens; the last partial block is dropped."""
    block_size = int(block_size)
    if block_size < 2:
        raise DataError("the block size must be at least 2 tokens (a causal LM predicts each token from the "
                        "ones before it), got {}".format(block_size))
    if not str(text).strip():
        raise DataError("{} is empty: a causal language model needs text to learn from".format(name))
    ids = np.asarray(tokenizer.encode(str(text), add_special_tokens=False), dtype=np.int64)
    if len(ids) < block_size:
        raise DataError("{} has {} tokens, fewer than one block of {}: give more text or a smaller block size"
                        .format(name, len(ids), block_size))
    check_vocabulary(ids, vocab_size, tokenizer, name)
    n = len(ids) // block_size
    return ids[:n * block_size].reshape(n, block_size)


class TextRows(NamedTuple):
    """A CSV of texts and labels, encoded: ids and attention mask (rows, max_length) int64, each row's
    label index, the label names (sorted), and the texts as written."""
    ids: np.ndarray
    mask: np.ndarray
    labels: np.ndarray
    classes: List[str]
    texts: List[str]


def read_text_csv(text: str, text_column: Optional[str] = None, label_column: Optional[str] = None,
                  name: str = "the CSV file") -> tuple:
    """(texts, labels) of a CSV with a header; default columns: the first for the text, the last for the label."""
    header, rows, lines = read_rows(str(text), name, sniff_delimiter(str(text)))
    if len(header) < 2:
        raise DataError("{} has {} column(s); it needs a text column and a label column".format(name, len(header)))
    text_column = text_column or header[0]
    label_column = label_column or header[-1]
    for col in (text_column, label_column):
        if col not in header:
            raise DataError("{} has no column {!r} (columns: {})".format(name, col, ", ".join(header)))
    if text_column == label_column:
        raise DataError("{}: the text and the label are both column {!r}".format(name, text_column))
    t, k = header.index(text_column), header.index(label_column)
    texts, labels = [r[t] for r in rows], [r[k].strip() for r in rows]
    for cells, line in zip(rows, lines):
        if not cells[k].strip():
            raise DataError("{} line {}: the label ({!r}) is empty".format(name, line, label_column))
    return texts, labels


def classification_rows(tokenizer: Tokenizer, texts: Sequence[str], labels: Sequence[str], max_length: int,
                        vocab_size: Optional[int] = None, classes: Optional[Sequence[str]] = None,
                        name: str = "the CSV file") -> TextRows:
    """Each text encoded with the tokenizer's special tokens, truncated to ``max_length`` ids (the end cut
    off) or padded after with :func:`pad_id`; the mask is 1 on the text's ids and 0 on the padding."""
    max_length = int(max_length)
    if max_length < 1:
        raise DataError("the sequence length must be at least 1, got {}".format(max_length))
    if not len(texts):
        raise DataError("{} has no rows of text".format(name))
    classes = sorted(set(labels)) if classes is None else list(classes)
    if len(classes) < 2:
        raise DataError("{}: classification needs at least 2 labels, found {}".format(name, classes))
    index = {c: i for i, c in enumerate(classes)}
    pad = pad_id(tokenizer)
    ids = np.full((len(texts), max_length), pad, dtype=np.int64)
    mask = np.zeros((len(texts), max_length), dtype=np.int64)
    for r, text in enumerate(texts):
        row = tokenizer.encode(str(text))[:max_length]
        ids[r, :len(row)] = row
        mask[r, :len(row)] = 1
    check_vocabulary(ids, vocab_size, tokenizer, name)
    unknown = [c for c in labels if c not in index]
    if unknown:
        raise DataError("{}: label {!r} is not one of the model's classes {}".format(name, unknown[0], classes))
    return TextRows(ids, mask, np.asarray([index[c] for c in labels], dtype=np.int64), classes, list(texts))
