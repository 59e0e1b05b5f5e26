"""Layer 2, formats: text for language models: a pure-Python reader of Hugging Face ``tokenizer.json`` (BPE,
WordPiece, Unigram) giving the ids the ``tokenizers`` package gives, and text as LM blocks or labelled rows."""
# The tokenizer families read: byte-level BPE as GPT-2's, Llama 3's, Qwen2's, GPT-4o's and Mistral's,
# SentencePiece BPE as Llama 2's, Gemma's and Phi-3's, WordPiece as BERT's, Unigram as T5's.
from __future__ import annotations

from pytrain.text.hub_config import TokenizerConfig
from pytrain.text.tokenizer import Tokenizer

__all__ = ["Tokenizer", "TokenizerConfig"]
