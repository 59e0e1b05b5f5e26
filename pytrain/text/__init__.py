"""Text for language models: a pure-Python reader of Hugging Face ``tokenizer.json`` (byte-level BPE
as GPT-2's, WordPiece as BERT's, Unigram as T5's) giving the ids the ``tokenizers`` package gives."""
from __future__ import annotations

from pytrain.text.tokenizer import Tokenizer

__all__ = ["Tokenizer"]
