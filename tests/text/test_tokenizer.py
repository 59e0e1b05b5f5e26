"""pytrain.text.Tokenizer against the ``tokenizers`` package: tokenizer.json files of GPT-2's, BERT's and
T5's shapes built offline (trained by ``tokenizers`` on a generated corpus, or made by transformers'
tokenizer classes from that vocabulary), and the same ids on a few thousand strings of each kind."""
from __future__ import annotations

import json
import random

import pytest

from pytrain.errors import DataError
from pytrain.text import Tokenizer

tokenizers = pytest.importorskip("tokenizers")
transformers = pytest.importorskip("transformers")

WORDS = ["hello", "world", "don't", "we'll", "they're", "I'm", "it's", "you've", "she'd", "naïve", "café",
         "Straße", "ΟΔΟΣ", "İstanbul", "ﬁne", "东京", "日本語", "한국어", "привет", "مرحبا", "שלום", "नमस्ते", "ไทย",
         "123", "4.5", "x²", "½", "Ⅻ", "$100", "a_b", "e-mail", "U.S.A.", "'''", "...", "?!"]
SPACES = [" ", "  ", "\t", "\n", "\r\n", "\x0b", "\x0c", "\x1c", "\x1f", "\x85", "\xa0", "\u1680", "\u2003",
          "\u200a", "\u2028", "\u202f", "\u205f", "\u3000", "\u200b", "\ufeff", "   \t "]
RANGES = [(0x20, 0x7E), (0xA0, 0x17F), (0x300, 0x36F), (0x370, 0x3FF), (0x400, 0x4FF), (0x590, 0x5FF),
          (0x600, 0x6FF), (0x900, 0x97F), (0xE00, 0xE7F), (0x1E00, 0x1EFF), (0x2000, 0x206F), (0x20A0, 0x20BF),
          (0x2100, 0x22FF), (0x3000, 0x30FF), (0x4E00, 0x4FFF), (0xAC00, 0xAD00), (0xFF00, 0xFFEF),
          (0x1F300, 0x1F64F), (0x1F900, 0x1F9FF), (0x20000, 0x20100), (0x0, 0x1F)]
EMOJI = ["😀", "👍🏽", "👨\u200d👩\u200d👧", "🇫🇷", "❤️", "🤖", "🫠", "🥰", "☃", "\u2764\ufe0f"]


def _word(rng: random.Random) -> str:
    return rng.choice(WORDS) if rng.random() < 0.6 else "".join(
        chr(rng.randint(*rng.choice(RANGES))) for _ in range(rng.randint(1, 6)))


def _join(rng: random.Random, parts) -> str:
    return "".join(p + rng.choice(SPACES if rng.random() < 0.3 else [" "]) for p in parts)


def strings(kind: str, n: int, seed: int):
    rng = random.Random(seed)
    out = [""]
    for _ in range(n):
        k = rng.randint(1, 8)
        if kind == "unicode":
            s = _join(rng, [_word(rng) for _ in range(k)])
        elif kind == "accents":
            s = _join(rng, ["".join(rng.choice("aeiouAEIOUnc") + (chr(rng.randint(0x300, 0x36F)) if rng.random() < .5
                                    else "") for _ in range(rng.randint(1, 5))) for _ in range(k)])
            s = s if rng.random() < .5 else s.replace("e\u0301", "é").upper()
        elif kind == "cjk":
            s = "".join(chr(rng.randint(*rng.choice([(0x4E00, 0x9FFF), (0x3040, 0x30FF), (0xAC00, 0xD7A3),
                                                      (0xFF01, 0xFF5E), (0x20000, 0x2A6DF)]))) + rng.choice(["", "", " ", "a"])
                        for _ in range(k * 2))
        elif kind == "emoji":
            s = _join(rng, [rng.choice(EMOJI) + rng.choice(["", "ok", "!", "1"]) for _ in range(k)])
        elif kind == "whitespace":
            s = "".join(rng.choice(SPACES) * rng.randint(1, 3) + rng.choice(["", "a", "ab", "1", "!", "'s"])
                        for _ in range(k))
        elif kind == "long":
            s = " ".join("".join(rng.choice("abcdefghijklmnopqrstuvwxyzé") for _ in range(rng.randint(20, 160)))
                         for _ in range(rng.randint(1, 2)))
        else:   # specials: added tokens inside text
            s = "".join(rng.choice(["<|endoftext|>", "[MASK]", "[SEP]", "</s>", "<pad>", " ", "x", "Hi ", "  "])
                        for _ in range(k))
        out.append(s)
    return out


KINDS = ["unicode", "accents", "cjk", "emoji", "whitespace", "long", "specials"]
CORPUS = [s for i, kind in enumerate(KINDS) for s in strings(kind, 150, 1000 + i)]


@pytest.fixture(scope="module")
def gpt2_like():
    bpe = tokenizers.ByteLevelBPETokenizer()
    bpe.train_from_iterator(CORPUS, vocab_size=1200, special_tokens=["<|endoftext|>"])
    model = json.loads(bpe.to_str())["model"]
    fast = transformers.GPT2TokenizerFast(vocab=model["vocab"], merges=[tuple(m) for m in model["merges"]])
    return {"trained": bpe._tokenizer, "GPT2TokenizerFast": fast.backend_tokenizer}


@pytest.fixture(scope="module")
def bert_like():
    wp = tokenizers.BertWordPieceTokenizer()
    wp.train_from_iterator(CORPUS, vocab_size=1500)
    fast = transformers.BertTokenizerFast(vocab=json.loads(wp.to_str())["model"]["vocab"])
    assert len(fast) > 500
    return {"trained": wp._tokenizer, "BertTokenizerFast": fast.backend_tokenizer}


@pytest.fixture(scope="module")
def t5_like():
    uni = tokenizers.SentencePieceUnigramTokenizer()
    uni.train_from_iterator(CORPUS, vocab_size=4000, special_tokens=["<pad>", "</s>", "<unk>"], unk_token="<unk>")
    vocab = [tuple(v) for v in json.loads(uni.to_str())["model"]["vocab"]]
    fast = transformers.T5TokenizerFast(vocab=vocab, extra_ids=3)
    return {"trained": uni._tokenizer, "T5TokenizerFast": fast.backend_tokenizer}


def _agree(reference, count: int = 500) -> None:
    ours = Tokenizer.from_json(reference.to_str())
    checked = 0
    for i, kind in enumerate(KINDS):
        for s in strings(kind, count, i):
            want = reference.encode(s)
            assert ours.encode(s) == want.ids, (kind, s, want.tokens)
            assert ours.decode(want.ids) == reference.decode(want.ids), (kind, s)
            checked += 1
    pair = ("Hello world", "don't stop 东京 [MASK]")
    assert ours.encode(*pair) == reference.encode(*pair).ids
    assert ours.encode(pair[0], add_special_tokens=False) == reference.encode(pair[0], add_special_tokens=False).ids
    assert ours.decode(reference.encode(pair[1]).ids, skip_special_tokens=False) == reference.decode(
        reference.encode(pair[1]).ids, skip_special_tokens=False)
    assert checked == len(KINDS) * (count + 1)


@pytest.mark.parametrize("source", ["trained", "GPT2TokenizerFast"])
def test_byte_level_bpe_as_gpt2(gpt2_like, source):
    assert json.loads(gpt2_like[source].to_str())["pre_tokenizer"]["type"] == "ByteLevel"
    _agree(gpt2_like[source])


@pytest.mark.parametrize("source", ["trained", "BertTokenizerFast"])
def test_wordpiece_as_bert(bert_like, source):
    _agree(bert_like[source])


@pytest.mark.parametrize("source", ["trained", "T5TokenizerFast"])
def test_unigram_as_t5(t5_like, source):
    _agree(t5_like[source])


def test_gpt2_split_matches_the_regex_on_every_class():
    """The \\p{L}/\\p{N}/\\s classes decided by unicodedata, checked against the Rust pre-tokenizer."""
    from pytrain.text.pretokenizers import gpt2_split
    reference = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    rng = random.Random(7)
    for _ in range(2000):
        s = "".join(rng.choice(["'s", "'ll", "'X", " ", "  ", "\t", "\x1c", "\xa0", "a", "Ö", "1", "²", "Ⅻ", "!",
                                "_", "东", "\u0301", "🤖", "\u2028"]) for _ in range(rng.randint(0, 10)))
        got = [p.encode("utf-8") for p in gpt2_split(s)]
        want = [bytes(CHAR_BYTE[c] for c in p) for p, _ in reference.pre_tokenize_str(s)]
        assert got == want, s


from pytrain.text.pretokenizers import CHAR_BYTE  # noqa: E402


def test_other_components_agree():
    """Split / Digits / Punctuation / Metaspace / Strip / Replace / NFKC, lstrip-rstrip-single_word added tokens."""
    from tokenizers import Regex, Tokenizer as Ref, models, normalizers, pre_tokenizers
    from tokenizers.processors import TemplateProcessing
    vocab = {c: i for i, c in enumerate(["<unk>", "▁", "a", "b", "1", "2", ",", "!", "-", "▁a", "ab", "▁ab"])}
    ref = Ref(models.WordPiece(vocab, unk_token="<unk>", continuing_subword_prefix="##"))
    ref.normalizer = normalizers.Sequence([normalizers.Strip(), normalizers.Replace(Regex("-+"), "-"),
                                           normalizers.NFKC(), normalizers.Lowercase()])
    ref.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(",", "merged_with_previous"), pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.Punctuation("contiguous"), pre_tokenizers.Metaspace(prepend_scheme="always")])
    ref.add_special_tokens([tokenizers.AddedToken("<x>", lstrip=True, rstrip=True)])
    ref.add_tokens([tokenizers.AddedToken("Ab", single_word=True, normalized=True)])
    ref.post_processor = TemplateProcessing(single="$A <x>", pair="$A <x> $B:1", special_tokens=[("<x>", 12)])
    ours = Tokenizer.from_json(ref.to_str())
    rng = random.Random(3)
    for _ in range(2000):
        s = "".join(rng.choice(["a", "b", "A", "B", "1", "12", ",", "!!", "--", " ", "  ", "<x>", " <x> ", "ab", "Ab",
                                "ＡＢ", "\t"]) for _ in range(rng.randint(0, 8)))
        assert ours.encode(s) == ref.encode(s).ids, s


def test_refuses_what_it_does_not_implement(gpt2_like, t5_like):
    base = json.loads(gpt2_like["trained"].to_str())

    def refused(change, *words):
        config = json.loads(json.dumps(base))
        change(config)
        with pytest.raises(DataError) as e:
            Tokenizer.from_json(json.dumps(config))
        for w in words:
            assert w in str(e.value)

    refused(lambda c: c.update(normalizer={"type": "Precompiled", "precompiled_charsmap": ""}), "normalizer",
            "Precompiled")
    refused(lambda c: c.update(pre_tokenizer={"type": "Whitespace"}), "pre_tokenizer", "'Whitespace'")
    refused(lambda c: c["model"].update(type="WordLevel"), "model", "'WordLevel'")
    refused(lambda c: c.update(pre_tokenizer={"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": "\\p{Han}+"}, "behavior": "Isolated", "invert": False}]}),
        "pre_tokenizer.pretokenizers[0].pattern", "\\p{Han}")
    refused(lambda c: c.update(post_processor={"type": "Nope"}), "post_processor", "'Nope'")
    refused(lambda c: c.update(normalizer={"type": "NFC"}, pre_tokenizer={
        "type": "Metaspace", "replacement": "_", "prepend_scheme": "first", "split": True}), "prepend_scheme 'first'")
    refused(lambda c: c.update(truncation={"max_length": 8}), "truncation")
    refused(lambda c: c["model"].update(dropout=0.1), "model.dropout")
    refused(lambda c: c["model"].update(merges=[["Ġ", "nosuchtoken"]]), "model.merges[0]", "nosuchtoken")
    refused(lambda c: c["model"].update(vocab=[1, 2]), "model", "vocab")
    refused(lambda c: c["added_tokens"][0].update(id="zero"), "added_tokens[0].id")
    with pytest.raises(DataError, match="not valid JSON"):
        Tokenizer.from_json(b"{nope")
    config = json.loads(t5_like["trained"].to_str())
    config["decoder"] = {"type": "CTC"}
    ours = Tokenizer.from_json(json.dumps(config))   # encoding does not need the decoder
    assert ours.encode("ab") == t5_like["trained"].encode("ab").ids
    with pytest.raises(DataError, match="decoder 'CTC'"):
        ours.decode([3])
    with pytest.raises(DataError, match="id 99999"):
        Tokenizer.from_json(t5_like["trained"].to_str()).decode([99999])


def test_from_file(tmp_path, bert_like):
    path = tmp_path / "tokenizer.json"
    path.write_text(bert_like["BertTokenizerFast"].to_str(), encoding="utf-8")
    ours = Tokenizer.from_file(str(path))
    assert ours.encode("Hello, WORLD!") == bert_like["BertTokenizerFast"].encode("Hello, WORLD!").ids
    with pytest.raises(DataError, match="does not exist"):
        Tokenizer.from_file(str(tmp_path / "missing.json"))
