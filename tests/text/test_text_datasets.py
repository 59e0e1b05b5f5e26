"""A text file as blocks of token ids for a causal LM, and a CSV of texts and labels as padded ids, mask and
label indices, through pytrain's tokenizer.json reader, against the ``tokenizers`` package's ids; bad input
(empty text, less than one block, ids beyond the model's vocabulary, a ragged or one-label CSV) is refused
with a DataError naming what is wrong."""
from __future__ import annotations

import numpy as np
import pytest

tokenizers = pytest.importorskip("tokenizers")

from pytrain.errors import DataError  # noqa: E402
from pytrain.text import Tokenizer  # noqa: E402
from pytrain.text.datasets import classification_rows, lm_blocks, pad_id, read_text_csv  # noqa: E402
from tiny_lm import TEXT, tokenizer_json  # noqa: E402


@pytest.fixture(scope="module")
def tj():
    return tokenizer_json()


def test_blocks_are_the_tokenizers_ids_cut_in_order_and_the_last_partial_block_dropped(tj):
    ref = tokenizers.Tokenizer.from_str(tj).encode(TEXT, add_special_tokens=False).ids
    blocks = lm_blocks(Tokenizer.from_json(tj), TEXT, 16)
    assert blocks.dtype == np.int64 and blocks.shape == (len(ref) // 16, 16)
    assert blocks.reshape(-1).tolist() == ref[:len(blocks) * 16]


@pytest.mark.parametrize("text, block, message", [
    ("", 16, "is empty"),
    ("   \n ", 16, "is empty"),
    ("the cat", 16, "fewer than one block of 16"),
    (TEXT, 1, "at least 2 tokens"),
])
def test_refuses_text_it_cannot_cut_into_blocks(tj, text, block, message):
    with pytest.raises(DataError, match=message):
        lm_blocks(Tokenizer.from_json(tj), text, block)


def test_refuses_ids_beyond_the_models_vocabulary_naming_the_id_and_the_size(tj):
    tok = Tokenizer.from_json(tj)
    top = int(lm_blocks(tok, TEXT, 16).max())
    with pytest.raises(DataError, match=r"id %d \(token .*\) but the model's vocabulary has 10 ids" % top):
        lm_blocks(tok, TEXT, 16, vocab_size=10)


def test_a_csv_becomes_padded_ids_a_mask_and_sorted_label_indices(tj):
    csv = "text,label\nthe cat sat on the mat,cat\na dog,dog\n\"the bird sang, the cat saw the bird\",bird\n"
    texts, labels = read_text_csv(csv)
    assert texts[2] == "the bird sang, the cat saw the bird" and labels == ["cat", "dog", "bird"]
    tok = Tokenizer.from_json(tj)
    rows = classification_rows(tok, texts, labels, 6)
    ref = tokenizers.Tokenizer.from_str(tj)
    assert rows.classes == ["bird", "cat", "dog"] and rows.labels.tolist() == [1, 2, 0]
    for r, text in enumerate(texts):
        want = ref.encode(text).ids[:6]
        assert rows.ids[r, :len(want)].tolist() == want
        assert rows.mask[r].tolist() == [1] * len(want) + [0] * (6 - len(want))
        assert (rows.ids[r, len(want):] == pad_id(tok)).all()
    assert pad_id(tok) == tok.token_to_id("<|endoftext|>")


@pytest.mark.parametrize("csv, message", [
    ("text\nonly one column\n", "needs a text column and a label column"),
    ("text,label\na,x\nb,x\n", "at least 2 labels"),
    ("text,label\na,x\nb,\n", "line 3: the label"),
    ("text,label\na,x,extra\n", "line 2: 3 cells"),
])
def test_refuses_a_csv_it_cannot_classify(tj, csv, message):
    with pytest.raises(DataError, match=message):
        texts, labels = read_text_csv(csv)
        classification_rows(Tokenizer.from_json(tj), texts, labels, 8)
