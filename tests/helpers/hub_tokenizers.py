"""tokenizer.json files shaped as the Hub ships each family's, built offline with the ``tokenizers`` package
(normalizer, pre-tokenizer, model options, decoder and post-processor as transformers'
convert_slow_tokenizer.py and the Hub's files write them), each with a small vocabulary trained on a
generated multilingual corpus; and tokenizer_config.json files beside them."""
from __future__ import annotations

import json
from typing import Callable, Dict, List

LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|"
          r"\s+(?!\S)|\s+")
QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|"
         r"\s+(?!\S)|\s+")
O200K = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
         r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
         r"\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
TEKKEN = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|"
          r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|"
          r"\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
#: tiktoken's own cl100k pattern, possessive quantifiers and all (what a tiktoken file converted verbatim carries)
CL100K_POSSESSIVE = (r"'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|"
                     r"\s++$|\s*[\r\n]|\s+(?!\S)|\s")
PATTERNS = {"llama3": LLAMA3, "qwen2": QWEN2, "gpt-4o": O200K, "tekken": TEKKEN, "cl100k-possessive": CL100K_POSSESSIVE}

SPECIALS = {
    "llama3": ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"],
    "qwen2": ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
    "gpt-4o": ["<|endoftext|>", "<|endofprompt|>"],
    "tekken": ["<unk>", "<s>", "</s>", "[INST]", "[/INST]"],
    "llama2": ["<unk>", "<s>", "</s>"], "mistral-v3": ["<unk>", "<s>", "</s>", "[INST]", "[/INST]"],
    "phi3": ["<unk>", "<s>", "</s>", "<|user|>", "<|assistant|>", "<|end|>"],
    "gemma": ["<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>"],
}
BYTE_LEVEL = ("llama3", "qwen2", "gpt-4o", "tekken")
SENTENCEPIECE = ("llama2", "mistral-v3", "phi3", "gemma")
FAMILIES = BYTE_LEVEL + SENTENCEPIECE


def _byte_level(family: str, corpus: List[str]):
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from tokenizers import normalizers
    tok = Tokenizer(models.BPE())
    if family == "qwen2":
        tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(PATTERNS[family]), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=1500, special_tokens=SPECIALS[family],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(corpus, trainer)
    if family != "qwen2":   # tiktoken conversions: a whole piece in the vocabulary is one token
        tok.model.ignore_merges = True
    first = SPECIALS[family][0 if family != "tekken" else 1]
    post = [processors.ByteLevel(trim_offsets=False)]
    if family in ("llama3", "tekken"):
        post.append(processors.TemplateProcessing(single=first + " $A", pair=first + " $A " + first + " $B:1",
                                                  special_tokens=[(first, tok.token_to_id(first))]))
    tok.post_processor = processors.Sequence(post) if len(post) > 1 else post[0]
    return tok


def _sentencepiece(family: str, corpus: List[str]):
    """A SentencePiece-converted BPE: byte-fallback ``<0xAB>`` tokens, ``▁`` for spaces, fused unknowns."""
    from tokenizers import Tokenizer, AddedToken, decoders, models, normalizers, pre_tokenizers, processors, trainers
    learner = Tokenizer(models.BPE(unk_token="<unk>"))
    learner.normalizer = normalizers.Replace(" ", "\u2581")
    learner.pre_tokenizer = pre_tokenizers.Split("\u2581", "merged_with_next")
    specials = SPECIALS[family]
    learner.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=1200, limit_alphabet=160, show_progress=False,
                                                            special_tokens=specials[:4 if family == "gemma" else 3]))
    learned = json.loads(learner.to_str())["model"]
    n = 4 if family == "gemma" else 3
    vocab = {t: i for t, i in learned["vocab"].items() if i < n}
    vocab.update(("<0x%02X>" % b, n + b) for b in range(256))
    vocab.update((t, i + 256) for t, i in learned["vocab"].items() if i >= n)
    merges = [tuple(m) for m in learned["merges"]]
    tok = Tokenizer(models.BPE(vocab, merges, unk_token="<unk>", fuse_unk=True, byte_fallback=True))
    strip = [] if family == "gemma" else [decoders.Strip(content=" ", left=1)]
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()] + strip)
    if family == "gemma":
        tok.normalizer = normalizers.Replace(" ", "\u2581")
        tok.pre_tokenizer = pre_tokenizers.Split(" ", "merged_with_previous")
    elif family == "mistral-v3":   # transformers' non-legacy Llama conversion
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first", split=False)
    else:                          # legacy (Llama 2, Phi-3)
        tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
    tok.add_special_tokens([AddedToken(t, normalized=False, special=True) for t in specials[:n]])
    tok.add_special_tokens([AddedToken(t, normalized=False, special=True, rstrip=family == "phi3")
                            for t in specials[n:]])
    bos = "<bos>" if family == "gemma" else "<s>"
    tok.post_processor = processors.TemplateProcessing(single=bos + " $A", pair=bos + " $A " + bos + " $B:1",
                                                       special_tokens=[(bos, tok.token_to_id(bos))])
    return tok


def build(family: str, corpus: List[str]):
    """The ``tokenizers.Tokenizer`` of ``family`` (one of :data:`FAMILIES`) trained on ``corpus``."""
    make: Callable = _byte_level if family in BYTE_LEVEL else _sentencepiece
    return make(family, corpus)


def tokenizer_config(family: str) -> Dict:
    """A tokenizer_config.json as the family's Hub repository has it (special tokens, template)."""
    names = SPECIALS[family]
    bos, eos = {"llama3": lambda: names[:2], "qwen2": lambda: [None, names[2]], "gpt-4o": lambda: [None, names[0]],
                "gemma": lambda: ["<bos>", "<eos>"], "phi3": lambda: ["<s>", "<|end|>"]}.get(
        family, lambda: ["<s>", "</s>"])()
    config = {"bos_token": bos, "eos_token": {"__type": "AddedToken", "content": eos, "special": True},
              "pad_token": None, "chat_template": "{% for m in messages %}{{ m['content'] }}{% endfor %}",
              "model_max_length": 8192}
    if family in SENTENCEPIECE:
        config.update(unk_token="<unk>", add_bos_token=True, add_eos_token=False)
    return config
