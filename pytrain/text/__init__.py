"""Layer 2, formats. Text for language models: a pure-Python reader of Hugging Face ``tokenizer.json`` (byte-level BPE
as GPT-2's, Llama 3's, Qwen2's, GPT-4o's and Mistral's, SentencePiece BPE as Llama 2's, Gemma's and Phi-3's,
WordPiece as BERT's, Unigram as T5's) giving the ids the ``tokenizers`` package gives."""
from __future__ import annotations

from pytrain.text.hub_config import TokenizerConfig
from pytrain.text.tokenizer import Tokenizer

__all__ = ["Tokenizer", "TokenizerConfig"]
