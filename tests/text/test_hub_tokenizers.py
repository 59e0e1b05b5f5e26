"""pytrain.text.Tokenizer on the tokenizers the Hub ships (Llama 3, Qwen2, GPT-4o, Mistral Tekken; Llama 2,
Mistral v3, Phi-3, Gemma) against the ``tokenizers`` package: the same ids and the same decoded text on a
few thousand generated strings per family, and each Oniguruma pattern's splits on its own; the Unicode
tables pytrain's translation uses equal the ones the oracle's regex engine has."""
from __future__ import annotations

import bisect
import json
import random

import pytest

from pytrain.errors import DataError
from pytrain.text import Tokenizer, TokenizerConfig
from pytrain.text._onig import categories, compile_onig, find_iter

tokenizers = pytest.importorskip("tokenizers")
import hub_tokenizers as hub  # noqa: E402
from test_tokenizer import CORPUS, KINDS, strings  # noqa: E402

#: what these patterns tell apart: contractions in every case (ſ and K fold to s and k, İ and ı do not to i),
#: digit runs, \r\n and whitespace runs, '/', letters cased and uncased, marks, letters new in Unicode 15/16
PIECES = ["'s", "'S", "'ll", "'LL", "'Re", "'ve", "'ſ", "'K", "'İ", "'ı", "'d", "'x", "'", "1", "12", "1234567", "²",
          "Ⅻ", "١٢", "\r\n", "\n", "\n\n", " \n ", "\r", " ", "  ", "   ", "\t", "\u3000", "\xa0", "\x1c", "/", "//",
          "a/b", "Hello", "hELLO", "HTTPServer", "ǅx", "ʰa", "东京", "\u0301", "é", "e\u0301", "Ꭰ", "ꭰ", "\u1c89",
          "\u1c8a", "\U00031350", "\U000105c0", "😀", "👍🏽", "!?", "...", "$5", "_", "-", "@", "#1"]


def _pattern_strings(n: int, seed: int):
    rng = random.Random(seed)
    return [""] + ["".join(rng.choice(PIECES) for _ in range(rng.randint(1, 10))) for _ in range(n)]


def _family_strings(family: str, n: int):
    out = []
    specials = hub.SPECIALS[family]
    for i, kind in enumerate(KINDS):
        out += strings(kind, n // (len(KINDS) + 2), 70 + i)
    rng = random.Random(len(family))
    for s in _pattern_strings(n // (len(KINDS) + 2), 9):
        k = rng.randint(0, len(s))
        out.append(s[:k] + rng.choice(specials + [" " + specials[-1] + " ", ""]) + s[k:])
    return out + _pattern_strings(n // (len(KINDS) + 2), 11)


def _splits(regex, s):
    """``s`` cut at ``regex``'s matches as an Isolated Split cuts it: (start, end) of the non-empty pieces."""
    got, done = [], 0
    for start, end in find_iter(regex, s):
        got += [(done, start)] if done < start else []
        got += [(start, end)] if end > start else []
        done = end
    return got + ([(done, len(s))] if done < len(s) else [])


@pytest.mark.parametrize("name", sorted(hub.PATTERNS))
def test_pattern_splits_as_oniguruma(name):
    pattern = hub.PATTERNS[name]
    ours = compile_onig(pattern, "pattern")
    reference = tokenizers.pre_tokenizers.Split(tokenizers.Regex(pattern), "isolated")
    for s in _pattern_strings(3000, 5) + [t for kind in KINDS for t in strings(kind, 100, 40)]:
        assert _splits(ours, s) == [offsets for _, offsets in reference.pre_tokenize_str(s)], (name, s)


_BUILT = {}


def _built(name: str):
    """A fresh copy of ``name``'s tokenizer (built once: a test may add tokens to its copy)."""
    if name not in _BUILT:
        _BUILT[name] = hub.build(name, CORPUS).to_str()
    return tokenizers.Tokenizer.from_str(_BUILT[name])


CONSTRUCTS = [r"(?i:'s|'t|'re|'ve|'m|'ll|'d|k)", r"'(?i:[sdmt]|ll)", r"\p{N}{1,3}+", r"a++b|a", r"(?>a(?>b+)c)|(?:ab++)++c",
              r"(?>x|xy)y", r"^a|b$", r"a\Z|\Ab|c\z", r"[^\s\p{L}\p{N}]+", r"\P{L}+|\p{^N}+", r"x{2,}|y{,2}|z{2}?",
              r"z{1,2}?", r"y*|b", r"(?<=a)b|(?<!x)y", r"(a|b)(?:c)(?<n>d)(?#note)", r"[[a-c]x\x{1F600}-\x{1F64F}]+",
              r"\p{P}\p{S}+|\p{Zs}|\p{Cc}", r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+", r".\.\t"]
ALPHABET = ["a", "b", "c", "d", "abc", "abbc", "xy", "xyy", "'s", "'S", "'ſ", "'K", "'k", "'İ", "ß", "\n", "\r\n", " ",
            "  ", "1", "123456", "x", "yyy", "zzz", "😀", "É", "ǅ", "ʰ", "中", "\u0301", "\x1c", "\u2028", "!", "$", ".",
            "\t", "\x85"]


@pytest.mark.parametrize("pattern", CONSTRUCTS)
def test_constructs_split_as_oniguruma(pattern):
    """Possessive and atomic forms (nested too), Ruby's anchors and {n}?, empty matches, folding, lookarounds."""
    ours = compile_onig(pattern, "pattern")
    reference = tokenizers.pre_tokenizers.Split(tokenizers.Regex(pattern), "isolated")
    rng = random.Random(pattern)
    for _ in range(600):
        s = "".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 8)))
        assert _splits(ours, s) == [offsets for _, offsets in reference.pre_tokenize_str(s)], (pattern, s)


@pytest.fixture(scope="module", params=hub.FAMILIES)
def family(request):
    return request.param, _built(request.param)


def test_family_ids_and_text(family):
    name, reference = family
    config = json.loads(reference.to_str())
    assert config["model"]["byte_fallback"] == (name in hub.SENTENCEPIECE)
    ours = Tokenizer.from_json(reference.to_str())
    texts = _family_strings(name, 1400)
    for s in texts:
        want = reference.encode(s)
        assert ours.encode(s) == want.ids, (name, s, want.tokens)
        for skip in (True, False):
            assert ours.decode(want.ids, skip) == reference.decode(want.ids, skip_special_tokens=skip), (name, s)
    pair = ("Hello 'S world\r\n", "  12345 东京 é")
    assert ours.encode(*pair) == reference.encode(*pair).ids
    assert ours.encode(pair[0], add_special_tokens=False) == reference.encode(pair[0], add_special_tokens=False).ids
    # byte fallback and unknown ids decode as the Rust decoders do (invalid UTF-8 runs, a lone unknown)
    rng = random.Random(4)
    for _ in range(300):
        ids = [rng.randrange(reference.get_vocab_size()) for _ in range(rng.randint(1, 6))]
        assert ours.decode(ids) == reference.decode(ids), (name, ids)


def test_unicode_tables_are_the_oracles():
    """Each general category and \\s as the oracle's Oniguruma classes them, on every code point where a
    run of pytrain's table starts or ends, where Python's unicodedata says otherwise, and 5000 others."""
    import unicodedata
    from unicode_oracle import CATEGORIES, oracle_members
    from pytrain.text._onig import SPACE_RANGES
    table = categories()
    points = {c for ranges in table.values() for a, b in ranges for c in (a - 1, a, b, b + 1)}
    rng = random.Random(2)
    points |= {rng.randrange(0x110000) for _ in range(5000)}
    points |= {c for name in CATEGORIES if name in table for a, b in table[name] if b < 0x40000
               for c in range(a, b + 1) if unicodedata.category(chr(c)) != name}
    points = sorted(c for c in points if 0 <= c <= 0x10FFFF and not 0xD800 <= c <= 0xDFFF)
    for name in [c for c in CATEGORIES if c != "Cs"] + ["L", "M", "N"]:
        assert _members(table.get(name, []), points) == oracle_members(r"\p{%s}" % name, points), name
    assert _members(SPACE_RANGES, points) == oracle_members(r"\s", points)


def _members(ranges, points):
    starts = [a for a, _ in ranges]
    return [c for c in points if bisect.bisect_right(starts, c) and c <= ranges[bisect.bisect_right(starts, c) - 1][1]]


def _transformers_tokenizer(reference, config, folder):
    transformers = pytest.importorskip("transformers")
    reference.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    return transformers.AutoTokenizer.from_pretrained(str(folder))   # a local folder: nothing downloaded


def test_tokenizer_config_special_tokens_and_template(family, tmp_path):
    """The special tokens' ids, the template and the ids of a text as transformers reads the same two files."""
    name, reference = family
    ours = Tokenizer.from_json(reference.to_str())
    assert ours.eos_token_id is None and ours.chat_template is None
    config = hub.tokenizer_config(name)
    assert ours.with_config(json.dumps(config)) is ours
    for key in ("bos_token", "eos_token"):
        text = config[key]["content"] if isinstance(config[key], dict) else config[key]
        assert ours.special_token(key) == text
        assert ours.special_token_id(key) == (None if text is None else reference.token_to_id(text))
    assert ours.eos_token_id == reference.token_to_id(ours.special_token("eos_token")) is not None
    assert ours.chat_template == config["chat_template"] and ours.pad_token_id is None
    hf = _transformers_tokenizer(reference, dict(config, add_eos_token=True), tmp_path)   # (which it ignores)
    for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
        assert getattr(ours, key) == getattr(hf, key), key
    assert ours.chat_template == hf.chat_template
    for s in ("Hello 'S world", "  12 东京\n"):
        assert ours.encode(s) == hf(s)["input_ids"]
    named = TokenizerConfig(dict(config, chat_template=[{"name": "default", "template": "A"},
                                                        {"name": "tool_use", "template": "B"}]))
    assert named.chat_template == "A" and named.chat_templates["tool_use"] == "B"
    assert TokenizerConfig(config, chat_template="C").chat_template == "C"   # chat_template.jinja wins
    (tmp_path / "chat_template.jinja").write_text("{{ messages }}", encoding="utf-8")
    folder = Tokenizer.from_folder(tmp_path)
    assert folder.eos_token_id == ours.eos_token_id and folder.chat_template == "{{ messages }}"
    assert folder.encode("Hello 'S world") == ours.encode("Hello 'S world")


def test_tokenizer_config_added_tokens(family):
    name, reference = family
    extra = {"content": "<|extra|>", "special": True, "normalized": False, "lstrip": False, "rstrip": False,
             "single_word": False}
    size = reference.get_vocab_size()
    decoder = {str(size): extra, str(reference.token_to_id(hub.SPECIALS[name][-1])): {"content": hub.SPECIALS[name][-1]}}
    ours = Tokenizer.from_json(reference.to_str()).with_config(json.dumps({"added_tokens_decoder": decoder}))
    reference.add_special_tokens([tokenizers.AddedToken("<|extra|>", special=True, normalized=False)])
    for s in ("a<|extra|>b", "<|extra|> x " + hub.SPECIALS[name][-1]):
        assert ours.encode(s) == reference.encode(s).ids
    assert ours.decode(ours.encode("a<|extra|>b")) == reference.decode(reference.encode("a<|extra|>b").ids)
    clash = {"added_tokens_decoder": {str(reference.token_to_id(hub.SPECIALS[name][-1])): {"content": "<other>"}}}
    with pytest.raises(DataError, match="added_tokens_decoder"):
        Tokenizer.from_json(reference.to_str()).with_config(json.dumps(clash))
    with pytest.raises(DataError, match="eos_token '<nope>' is not a token"):
        Tokenizer.from_json(reference.to_str()).with_config(json.dumps({"eos_token": "<nope>"}))
    with pytest.raises(DataError, match="tokenizer_config.json is not valid JSON"):
        TokenizerConfig.from_json("{")


@pytest.mark.parametrize("pattern,what", [
    (r"\d+", "\\d"), (r"\w+", "\\w"), (r"\bx", "\\b"), (r"\p{Han}", "\\p{Han}"), (r"(a)\1", "\\1"),
    (r"[[:alpha:]]", "POSIX"), (r"[a-z&&[^c]]", "intersection"), (r"(?i:é)", "case-insensitive"),
    (r"(?i:ss)", "case-insensitive"), (r"(?i:[^a])", "case-insensitive class"), (r"(?i)a", "group"),
    (r"(?<=a+)b", "re rejects"), (r"(a", "unclosed"), (r"a)", "unbalanced"), (r"*a", "nothing to repeat"),
])
def test_patterns_outside_the_translation_are_refused(pattern, what):
    with pytest.raises(DataError) as e:
        compile_onig(pattern, "pre_tokenizer.pretokenizers[0].pattern")
    assert what in str(e.value) and repr(pattern) in str(e.value) and "pre_tokenizer.pretokenizers[0]" in str(e.value)


_ON_PY38 = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
from pytrain.text import Tokenizer
out = {}
for family, case in json.load(open(sys.argv[2], encoding="utf-8")).items():
    tok = Tokenizer.from_json(case["json"])
    out[family] = [[tok.encode(s), tok.decode(ids)] for s, ids in case["texts"]]
json.dump(out, open(sys.argv[3], "w", encoding="utf-8"))
"""


def test_same_ids_on_python38(py38, tmp_path):
    """The browser's Python (3.8, whose unicodedata is Unicode 12.1) splits and tokenizes as the oracle does."""
    import subprocess
    from pathlib import Path
    cases = {}
    for name in hub.FAMILIES:
        reference = _built(name)
        texts = _family_strings(name, 160)
        cases[name] = {"json": reference.to_str(), "texts": [(s, reference.encode(s).ids) for s in texts]}
    (tmp_path / "in.json").write_text(json.dumps(cases), encoding="utf-8")
    (tmp_path / "run.py").write_text(_ON_PY38, encoding="utf-8")
    subprocess.run([str(py38), str(tmp_path / "run.py"), str(Path(__file__).resolve().parents[2]),
                    str(tmp_path / "in.json"), str(tmp_path / "out.json")], check=True)
    got = json.loads((tmp_path / "out.json").read_text(encoding="utf-8"))
    for name in hub.FAMILIES:
        reference = tokenizers.Tokenizer.from_str(cases[name]["json"])
        for (s, ids), (ours, text) in zip(cases[name]["texts"], got[name]):
            assert ours == ids and text == reference.decode(ids), (name, s)


from test_python38_numpy117 import py38  # noqa: E402,F401  (the 3.8 + numpy 1.17 venv fixture)


def _components():
    from tokenizers import Regex, decoders as d, normalizers as n, pre_tokenizers as p
    pre = [p.Metaspace(prepend_scheme=s, split=split) for s in ("first", "always", "never") for split in (True, False)]
    pre += [p.Split(pattern, b, invert=inv) for pattern in ("▁", Regex(r"\s+|\p{N}{1,2}"), Regex("x?"))
            for b in ("removed", "isolated", "merged_with_previous", "merged_with_next", "contiguous")
            for inv in (False, True)]
    pre += [p.Digits(individual_digits=True), p.Digits(individual_digits=False),
            p.ByteLevel(add_prefix_space=True, use_regex=False), p.ByteLevel(add_prefix_space=False, use_regex=True),
            p.Sequence([p.Split(Regex(hub.LLAMA3), "isolated"), p.ByteLevel(add_prefix_space=False, use_regex=False)])]
    norm = [n.Prepend("▁"), n.Replace(" ", "▁"), n.Replace(Regex(r"\s{2,}|^\s|\s$"), "_"), n.Replace(Regex("x?"), "-"),
            n.Sequence([n.Prepend("▁"), n.Replace(" ", "▁")]), n.NFC()]
    dec = [d.Sequence([d.Replace("▁", " "), d.ByteFallback(), d.Fuse(), d.Strip(" ", 1, 0)]), d.Strip(" ", 0, 1),
           d.ByteFallback(), d.Fuse(), d.Metaspace(prepend_scheme="first"), d.Metaspace(prepend_scheme="never"),
           d.Replace(Regex(r"▁+"), " "), d.ByteLevel()]
    return pre, norm, dec


def test_components_one_by_one():
    """Each pre-tokenizer, normalizer and decoder these families use, in every mode, on its own."""
    from pytrain.text.decoders import build_decoder
    from pytrain.text.normalizers import build_normalizer
    from pytrain.text.pretokenizers import build_pre_tokenizer
    pre, norm, dec = _components()
    texts = _pattern_strings(300, 13) + ["▁a▁▁b", " x ", "xx", "▁", "1234 56", "a\U0001e4f1\U00010d41b٣²"]
    for ref in pre:
        ours = build_pre_tokenizer(json.loads(ref.__getstate__()))
        for s in texts:
            assert [t for t, _ in ours([(s, True)])] == [t for t, _ in ref.pre_tokenize_str(s)], (ref, s)
    for ref in norm:
        ours = build_normalizer(json.loads(ref.__getstate__()))
        for s in texts:
            assert ours(s) == ref.normalize_str(s), (ref, s)
    rng = random.Random(6)
    pieces = ["▁", "▁a", "a", " ", "  ", "<0xE2>", "<0x82>", "<0xAC>", "<0x41>", "<0xff>", "<0x+F>", "<0xZZ>", "▁▁b",
              "x▁y", "<0x0A>", "Ġhi", "Ċ"]
    for ref in dec:
        ours = build_decoder(json.loads(ref.__getstate__()))
        for _ in range(300):
            tokens = [rng.choice(pieces) for _ in range(rng.randint(1, 6))]
            assert "".join(ours(tokens)) == ref.decode(tokens), (ref, tokens)
