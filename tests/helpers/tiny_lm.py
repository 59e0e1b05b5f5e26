"""A tiny GPT-2 and its tokenizer made inside a test (nothing from a hub): a byte-level BPE trained with
the ``tokenizers`` package on a short text, GPT2LMHeadModel (2 layers, n_embd 32, 2 heads, eager
attention, no dropout) over that vocabulary, exported by ``pytrain.torch_export`` as ``input_ids ->
logits`` (N, T, V)
at a fixed length T."""
from __future__ import annotations

import warnings
from typing import NamedTuple

import numpy as np

TEXT = ("the cat sat on the mat. the dog sat on the log. a cat and a dog met on the mat and sat. "
        "the bird sang in the tree, the cat saw the bird, the dog saw the cat. ") * 6
VOCAB = 300   # the 256 bytes, <|endoftext|> and some merges
LENGTH = 16   # the sequence length the text tests export at (tests/conftest.py's ``lm``)
#: a CSV of texts and labels (three classes, 27 rows) for the text classifiers
CSV = "text,label\n" + "".join("%s,%s\n" % (t, l) for t, l in [
    ("the cat sat on the mat", "cat"), ("a cat and a mat", "cat"), ("the cat saw the bird", "cat"),
    ("the dog sat on the log", "dog"), ("a dog met a dog", "dog"), ("the dog saw the cat", "dog"),
    ("the bird sang in the tree", "bird"), ("a bird in a tree", "bird"), ("the bird sang", "bird")] * 3)


class TinyLM(NamedTuple):
    onnx: bytes            # input_ids (batch, length) int64 -> logits (batch, length, vocab)
    tokenizer_json: str
    torch_model: object    # the GPT2LMHeadModel the file was exported from
    vocab_size: int


def tokenizer_json(text: str = TEXT, vocab: int = VOCAB) -> str:
    """A byte-level BPE (GPT-2's kind) trained on ``text``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator([text], trainer)
    return tok.to_str()


def tiny_gpt2(text: str = TEXT, length: int = 16, positions: int = 64, seed: int = 0) -> TinyLM:
    """The model exported at sequence ``length`` (a fixed axis, as torch_export writes it; the batch is dynamic)."""
    import torch
    from torch_zoo import stub_torchvision_ops

    stub_torchvision_ops()   # transformers imports torchvision, whose compiled ops this torch may lack
    from transformers import GPT2Config, GPT2LMHeadModel

    from hf_families import Logits

    import pytrain

    tj = tokenizer_json(text)
    from tokenizers import Tokenizer
    vocab = Tokenizer.from_str(tj).get_vocab_size()
    torch.manual_seed(seed)
    cfg = GPT2Config(vocab_size=vocab, n_embd=32, n_layer=2, n_head=2, n_positions=positions, resid_pdrop=0.0,
                     embd_pdrop=0.0, attn_pdrop=0.0, tie_word_embeddings=False, attn_implementation="eager",
                     bos_token_id=0, eos_token_id=0)
    hf = GPT2LMHeadModel(cfg).eval()

    example = torch.from_numpy(np.arange(length, dtype=np.int64).reshape(1, length) % vocab)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        blob = pytrain.torch_export(Logits(hf, ["input_ids"]).eval(), (example,), None, input_names=["input_ids"],
                                    output_names=["logits"])
    return TinyLM(bytes(blob), tj, hf, vocab)


def tiny_bert_classifier(vocab: int, classes: int = 3, length: int = 16, seed: int = 0) -> bytes:
    """A BertForSequenceClassification (1 layer, hidden 32) over ``vocab`` ids, exported by ``pytrain.torch_export``
    as ``input_ids, attention_mask -> logits`` (batch, classes) at a fixed ``length``."""
    import torch
    from torch_zoo import stub_torchvision_ops

    stub_torchvision_ops()
    from transformers import BertConfig, BertForSequenceClassification

    from hf_families import Logits

    import pytrain

    torch.manual_seed(seed)
    cfg = BertConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                     max_position_embeddings=2 * length, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                     num_labels=classes, attn_implementation="eager")
    hf = BertForSequenceClassification(cfg).eval()

    ids = torch.from_numpy(np.arange(length, dtype=np.int64).reshape(1, length) % vocab)
    mask = torch.ones((1, length), dtype=torch.int64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return bytes(pytrain.torch_export(Logits(hf, ["input_ids", "attention_mask"]).eval(), (ids, mask), None, input_names=["input_ids", "attention_mask"],
                                          output_names=["logits"]))
