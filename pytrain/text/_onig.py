"""Oniguruma patterns (tokenizer.json's ``{"Regex": ...}``) as Python ``re`` patterns that match exactly
the same spans, on Python 3.8 as on 3.11+, without the ``regex`` package: ``\\p{..}`` and ``\\s`` become
explicit character classes from the Unicode tables Oniguruma uses (:mod:`pytrain.text._unicode_gc`, which
``unicodedata``'s older Unicode would get wrong on recent characters), possessive quantifiers and atomic
groups become a lookahead and a backreference (``(?=(?P<a>X))(?P=a)``: what the lookahead matched, never
given back), ``^``/``$`` mean a line's start and end as in Ruby. A construct outside this subset (``\\d``, ``\\w``,
``\\b``, back-references, scripts, POSIX brackets, class intersections, case folding beyond ASCII) is refused
naming the pattern, never translated approximately."""
from __future__ import annotations

import re
from typing import Dict, Iterator, List, Optional, Tuple

from pytrain.errors import DataError
from pytrain.text._unicode_gc import RUNS

Ranges = List[Tuple[int, int]]

#: Unicode's White_Space: Oniguruma's ``\s`` (Python's also takes U+001C..U+001F)
SPACE_RANGES: Ranges = [(0x9, 0xD), (0x20, 0x20), (0x85, 0x85), (0xA0, 0xA0), (0x1680, 0x1680), (0x2000, 0x200A),
                        (0x2028, 0x2029), (0x202F, 0x202F), (0x205F, 0x205F), (0x3000, 0x3000)]
_SIMPLE_ESCAPES = {"t": 0x9, "n": 0xA, "r": 0xD, "f": 0xC, "v": 0xB, "a": 0x7, "e": 0x1B}
_CATEGORIES: Dict[str, Ranges] = {}
_MULTI_FOLDS = ("ss", "st", "ff", "fi", "fl")


def categories() -> Dict[str, Ranges]:
    if not _CATEGORIES:
        cp = 0
        for name, count in re.findall(r"([A-Z][a-z])(\d*)", "".join(RUNS)):
            n = int(count or 1)
            _CATEGORIES.setdefault(name, []).append((cp, cp + n - 1))
            _CATEGORIES.setdefault(name[0], []).append((cp, cp + n - 1))
            cp += n
        for name in list(_CATEGORIES):
            _CATEGORIES[name] = _merge(_CATEGORIES[name])
    return _CATEGORIES


def _merge(ranges: Ranges) -> Ranges:
    out: Ranges = []
    for a, b in sorted(ranges):
        if out and a <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _complement(ranges: Ranges) -> Ranges:
    out, start = [], 0
    for a, b in _merge(ranges):
        if a > start:
            out.append((start, a - 1))
        start = b + 1
    if start <= 0x10FFFF:
        out.append((start, 0x10FFFF))
    return out


def _set_source(ranges: Ranges) -> str:
    return "[" + "".join("\\U%08x" % a if a == b else "\\U%08x-\\U%08x" % (a, b) for a, b in ranges) + "]"


def _class_source(ranges: Ranges) -> str:
    """A class as ``re`` source. sre tests a class reaching past U+FFFF range by range, so the BMP part
    goes in a class of its own (a bitmap: one lookup) and the rest behind a one-range guard."""
    ranges = _merge(ranges)
    bmp = [(a, min(b, 0xFFFF)) for a, b in ranges if a <= 0xFFFF]
    astral = [(max(a, 0x10000), b) for a, b in ranges if b > 0xFFFF]
    if not ranges:
        return "(?!)"
    if not astral or not bmp:
        return _set_source(ranges)
    return "(?:%s|(?=[\\U00010000-\\U0010ffff])%s)" % (_set_source(bmp), _set_source(astral))


class _Parser:
    """A recursive-descent reader of one pattern, writing the ``re`` source as it goes."""

    def __init__(self, pattern: str, where: str) -> None:
        self.p, self.i, self.where, self.groups = pattern, 0, where, 0

    def refuse(self, what: str) -> DataError:
        return DataError("tokenizer.json: {}: regex {!r} uses {} (at offset {}), which pytrain does not reproduce "
                         "exactly; refusing it rather than splitting differently from Hugging Face tokenizers"
                         .format(self.where, self.p, what, self.i))

    def peek(self, k: int = 0) -> str:
        return self.p[self.i + k] if self.i + k < len(self.p) else ""

    def alternation(self, folded: bool) -> str:
        out = [self.sequence(folded)]
        while self.peek() == "|":
            self.i += 1
            out.append(self.sequence(folded))
        return "|".join(out)

    def sequence(self, folded: bool) -> str:
        out = []
        while self.peek() not in ("", "|", ")"):
            atom = self.atom(folded)
            if atom is not None:
                out.append(self.quantified(atom))
        return "".join(out)

    def quantified(self, atom: str) -> str:
        while True:
            c = self.peek()
            m = re.match(r"\{(\d*)(,?)(\d*)\}", self.p[self.i:]) if c == "{" else None
            if c in ("*", "+", "?"):
                self.i += 1
                if self.peek() == "+":      # possessive: matched once, never given back
                    self.i += 1
                    atom = self.atomic(atom + c)
                elif self.peek() == "?":
                    self.i += 1
                    atom = "(?:%s%s?)" % (atom, c)
                else:
                    atom = "(?:%s%s)" % (atom, c)
            elif m is not None and (m.group(1) or m.group(3)):
                self.i += len(m.group(0))
                low = m.group(1) or "0"
                q = "{%s%s%s}" % (low, m.group(2), m.group(3))
                atom = "(?:%s%s)" % (atom, q)
                if self.peek() == "?":   # {n,m}? is lazy, {n}? optional; a following + repeats, as in Ruby
                    self.i += 1
                    atom = "(?:%s?)" % atom[3:-1] if m.group(2) else "(?:%s?)" % atom
            else:
                return atom

    def atomic(self, body: str) -> str:
        # named, not numbered: an enclosing atomic group is written after its body but opens before it
        self.groups += 1
        return "(?=(?P<_a%d>%s))(?P=_a%d)" % (self.groups, body, self.groups)

    def atom(self, folded: bool) -> Optional[str]:
        c = self.peek()
        self.i += 1
        if c == "(":
            return self.group(folded)
        if c == "[":
            negated = self.peek() == "^"
            ranges = self.char_class()
            if folded and (negated or ranges[-1][1] > 0x7F or any(a <= ord(x) <= b for a, b in ranges for x in "iI")):
                raise self.refuse("a case-insensitive class beyond ASCII letters other than i")
            return _class_source(ranges)
        if c == ".":
            return "[^\\n]"
        if c == "^":
            return "(?:(?<=\\n)|\\A)"
        if c == "$":
            return "(?=\\n|\\Z)"
        if c == "\\":
            return self.escape(folded)
        if c in ("*", "+", "?"):
            raise self.refuse("a quantifier with nothing to repeat")
        if folded and (not c.isascii() or c in "iI" or (self.p[self.i - 2:self.i].lower() in _MULTI_FOLDS)):
            # beyond ASCII, and for i (İ, ı) and the letter pairs that one character folds to (ß: ss),
            # Python's simple case folding and Oniguruma's full one disagree
            raise self.refuse("a case-insensitive {!r}".format(self.p[self.i - 2:self.i]))
        return re.escape(c)

    def group(self, folded: bool) -> Optional[str]:
        rest = self.p[self.i:]
        head = re.match(r"\?(?::|i:|=|!|<=|<!|>|#[^)]*|<[A-Za-z_]\w*>|'[A-Za-z_]\w*')|(?!\?)", rest)
        if head is None:
            raise self.refuse("the group {!r}".format("(" + rest[:4]))
        kind = head.group(0)
        self.i += len(kind)
        if kind.startswith("?#"):
            self.close()
            return None
        body = self.alternation(folded or kind == "?i:")
        self.close()
        if kind == "?>":
            return self.atomic(body)
        if kind in ("?=", "?!", "?<=", "?<!"):
            return "(%s%s)" % (kind, body)
        return ("(?i:%s)" if kind == "?i:" else "(?:%s)") % body

    def close(self) -> None:
        if self.peek() != ")":
            raise self.refuse("an unclosed group")
        self.i += 1

    def escape(self, folded: bool) -> str:
        c = self.peek()
        if c in ("A", "z", "Z"):
            self.i += 1
            return {"A": "\\A", "z": "\\Z", "Z": "(?=\\n?\\Z)"}[c]
        ranges = self.escape_ranges()
        if folded and (len(ranges) != 1 or ranges[0][0] != ranges[0][1] or ranges[0][0] > 0x7F
                       or chr(ranges[0][0]).isalpha()):
            raise self.refuse("an escape inside a case-insensitive group")
        return _class_source(ranges)

    def escape_ranges(self) -> Ranges:
        """The code points of the escape after a backslash (a class or one character)."""
        c = self.peek()
        self.i += 1
        if c in ("p", "P"):
            m = re.match(r"\{(\^?)([A-Za-z]{1,2})\}", self.p[self.i:])
            name = m.group(2).capitalize() if m else None
            table = categories()
            if m is None or name not in table:
                raise self.refuse("the property \\{}{}".format(c, self.p[self.i:self.i + 12].split("}")[0] + "}"))
            self.i += len(m.group(0))
            negate = (c == "P") != bool(m.group(1))
            return _complement(table[name]) if negate else list(table[name])
        if c in ("s", "S"):
            return SPACE_RANGES if c == "s" else _complement(SPACE_RANGES)
        if c in _SIMPLE_ESCAPES:
            return [(_SIMPLE_ESCAPES[c],) * 2]
        m = re.match(r"x\{([0-9A-Fa-f]{1,8})\}|x([0-9A-Fa-f]{2})|u([0-9A-Fa-f]{4})", c + self.p[self.i:])
        if m is not None:
            self.i += len(m.group(0)) - 1
            cp = int(next(g for g in m.groups() if g), 16)
            return [(cp, cp)]
        if c and not c.isalnum() and c.isascii():
            return [(ord(c), ord(c))]
        raise self.refuse("the escape \\{}".format(c))

    def char_class(self) -> Ranges:
        negate = self.peek() == "^"
        self.i += negate
        if self.peek() == "]":
            raise self.refuse("a ']' first in a class")
        ranges: Ranges = []
        while self.peek() != "]":
            if self.peek() == "":
                raise self.refuse("an unclosed character class")
            if self.p.startswith("&&", self.i) or self.p.startswith("[:", self.i):
                raise self.refuse("a class intersection or a POSIX bracket")
            if self.peek() == "[":
                self.i += 1
                ranges += self.char_class()
                continue
            low = self.class_item()
            if self.peek() == "-" and self.peek(1) not in ("]", ""):
                self.i += 1
                high = self.class_item()
                if len(low) != 1 or len(high) != 1 or low[0][0] != low[0][1] or high[0][0] != high[0][1]:
                    raise self.refuse("a range between classes")
                ranges.append((low[0][0], high[0][0]))
            else:
                ranges += low
        self.i += 1
        return _complement(ranges) if negate else _merge(ranges)

    def class_item(self) -> Ranges:
        c = self.peek()
        self.i += 1
        if c == "\\":
            return self.escape_ranges()
        return [(ord(c), ord(c))]


_CACHE: Dict[str, "re.Pattern[str]"] = {}


def find_iter(pattern: "re.Pattern[str]", text: str) -> Iterator[Tuple[int, int]]:
    """The (start, end) of each match as the ``onig`` crate's ``find_iter`` gives them: after an empty
    match, or an empty one where the last match ended, the search moves on one character (Python's
    ``finditer`` would try a longer match at the same place)."""
    pos, last_end = 0, -1
    while pos <= len(text):
        m = pattern.search(text, pos)
        if m is None:
            return
        start, end = m.span()
        if start == end and end == last_end:
            pos = end + 1
            continue
        pos = last_end = end
        yield start, end


def compile_onig(pattern: str, where: str) -> "re.Pattern[str]":
    """``pattern`` (Oniguruma syntax, as the ``tokenizers`` package reads it) as a Python ``re`` pattern
    matching the same spans; a construct outside the translated subset raises a DataError naming it."""
    if pattern in _CACHE:
        return _CACHE[pattern]
    parser = _Parser(pattern, where)
    source = parser.alternation(False)
    if parser.i != len(pattern):
        raise parser.refuse("an unbalanced ')'")
    try:
        compiled = re.compile(source)
    except re.error as e:   # e.g. a lookbehind of variable width, which Oniguruma allows and re does not
        raise parser.refuse("a construct Python's re rejects ({})".format(e)) from None
    _CACHE[pattern] = compiled
    return compiled
