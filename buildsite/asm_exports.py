"""pyodide.asm.js's export wrappers written as one loop.

emscripten writes one JS function per wasm export of Pyodide's main module, 5,411 of them (957 KB of the file's
1.75 MB), each ``var _f=Module["_f"]=function(){return(_f=Module["_f"]=Module["asm"]["f"]).apply(null,arguments)};``.
A worker's importScripts gets no V8 code cache, so every visit parses them twice (the script's preparse, then the
factory function's full parse when Pyodide creates its module) before Python starts. Only ~70 of the local
variables are read by the rest of the file; the others exist for ``Module["_f"]``. Those become one loop over their
names making the same self-replacing wrappers (first call: ``Module["_f"]`` becomes the export itself), at the same
place in the factory, so every ``Module`` property and every variable the file reads is what it was.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import List, Tuple

_WRAPPER = re.compile(r'var ([\w$]+)=Module\["\1"\]=function\(\)\{return\(\1=Module\["\1"\]=Module\["asm"\]\["([\w$]+)"\]\)'
                      r'\.apply\(null,arguments\)\};')
#: the loop: "_" + each name of the first list, each name of the second as it is
_LOOP = ('[{p}].forEach(function(n){{var k="_"+n;Module[k]=function(){{return(Module[k]=Module["asm"][n]).apply(null,arguments)}}}});'
         '[{q}].forEach(function(n){{Module[n]=function(){{return(Module[n]=Module["asm"][n]).apply(null,arguments)}}}});')


def compact(js: str, minimum: int = 100) -> Tuple[str, int]:
    """``js`` with the wrappers of variables nothing else reads replaced by the loop; and how many were replaced
    (0: ``js`` unchanged: fewer than ``minimum`` wrappers, not the emscripten output expected)."""
    found = list(_WRAPPER.finditer(js))
    if len(found) < minimum:
        return js, 0
    rest = _WRAPPER.sub("", js)
    used = set(re.findall(r'(?<![\w$."])([\w$]+)', rest))
    prefixed: List[str] = []
    plain: List[str] = []
    drop = set()
    for m in found:
        var, export = m.group(1), m.group(2)
        if var in used or var in drop or var not in ("_" + export, export):
            continue
        drop.add(var)
        (prefixed if var == "_" + export else plain).append(export)
    if not drop:
        return js, 0
    out: List[str] = []
    pos, placed = 0, False
    for m in found:
        if m.group(1) not in drop:
            continue
        out.append(js[pos:m.start()])
        if not placed:
            out.append(_LOOP.format(p=",".join(json.dumps(n) for n in prefixed), q=",".join(json.dumps(n) for n in plain)))
            placed = True
        pos = m.end()
    out.append(js[pos:])
    return "".join(out), len(drop)


def compact_file(path: Path) -> int:
    """Rewrite pyodide.asm.js in place (see compact); how many wrappers went into the loop."""
    js = path.read_text(encoding="utf-8")
    new, n = compact(js)
    if n:
        path.write_text(new, encoding="utf-8")
    return n
