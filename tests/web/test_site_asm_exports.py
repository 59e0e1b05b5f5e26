"""buildsite/asm_exports.py: pyodide.asm.js's per-export wrappers that only set ``Module["_f"]`` become one loop that
makes the same self-replacing wrappers; a wrapper whose variable the rest of the file reads stays as it was."""
from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest

import build
from buildsite.asm_exports import compact

NODE = shutil.which("node")
needs_node = pytest.mark.skipif(NODE is None, reason="no node")
ASM_JS = build.PYODIDE_NPM / "pyodide.asm.js"


def _wrapper(var: str, export: str) -> str:
    return ('var {v}=Module["{v}"]=function(){{return({v}=Module["{v}"]=Module["asm"]["{e}"]).apply(null,arguments)}};'
            .format(v=var, e=export))


def _factory(n: int) -> str:
    """An emscripten-shaped factory: n wrappers of "_f<i>", one of "dynCall_x", and code reading "_f0" itself."""
    body = "".join(_wrapper("_f%d" % i, "f%d" % i) for i in range(n)) + _wrapper("dynCall_x", "dynCall_x")
    return ("function factory(Module){var before=typeof Module._f5;" + body +
            "Module.useF0=function(a){return _f0(a)};return before}")


def _run(js: str, script: str) -> dict:
    out = subprocess.run([NODE, "-e", js + "\n" + script], capture_output=True, text=True, timeout=60, check=True)
    return json.loads(out.stdout)


# what a factory leaves: every Module key a function, calls reaching the exports, the first call replacing the wrapper
_PROBE = """
const M = {};
const before = factory(M);
M.asm = {dynCall_x: (a) => a * 10};
for (let i = 0; i < 150; i++) M.asm["f" + i] = ((k) => (a) => a + k)(i);
const keys = Object.keys(M).filter((k) => k !== "asm" && k !== "useF0").sort();
const wrapped = typeof M._f7 === "function" && M._f7 !== M.asm.f7;
const calls = [M._f7(1), M._f149(1), M.dynCall_x(2), M.useF0(5)];
console.log(JSON.stringify({before, keys, wrapped, calls, replaced: M._f7 === M.asm.f7 && M.dynCall_x === M.asm.dynCall_x}));
"""


@needs_node
def test_the_loop_makes_the_same_module_as_the_wrappers():
    js = _factory(150)
    new, n = compact(js)
    assert n == 150   # _f0 is read by the factory's own code: kept; the other 149 and dynCall_x go into the loop
    assert _wrapper("_f0", "f0") in new and _wrapper("_f1", "f1") not in new and _wrapper("dynCall_x", "dynCall_x") not in new
    assert len(new) < len(js) / 2
    assert _run(new, _PROBE) == _run(js, _PROBE)
    got = _run(new, _PROBE)
    assert got["calls"] == [8, 150, 20, 5] and got["wrapped"] and got["replaced"] and len(got["keys"]) == 151


def test_a_file_with_few_wrappers_or_none_stays_as_it_is():
    js = _factory(5)
    assert compact(js) == (js, 0)
    assert compact("var x=1;") == ("var x=1;", 0)


def test_a_variable_read_elsewhere_keeps_its_wrapper_and_properties_do_not_count_as_reads():
    # (any other appearance of the name keeps it, an object literal's key too: the scan does not parse JS)
    js = _factory(150) + 'var o={_f3:1};o._f4;o["_f5"];function g(){return _f6+1}'
    new, n = compact(js)
    assert all(_wrapper("_f%d" % i, "f%d" % i) in new for i in (0, 3, 6))
    assert all(_wrapper("_f%d" % i, "f%d" % i) not in new for i in (4, 5))
    assert n == 148


@needs_node
@pytest.mark.skipif(not ASM_JS.is_file(), reason="npm ci has not fetched Pyodide")
def test_pyodide_asm_js_compacted_parses_and_keeps_every_export():
    js = ASM_JS.read_text(encoding="utf-8")
    new, n = compact(js)
    assert n > 5000 and len(new) < 0.6 * len(js)
    wrapper = re.compile(r'var ([\w$]+)=Module\["\1"\]=function\(\)\{return\(\1=Module\["\1"\]=Module\["asm"\]\["([\w$]+)"\]\)')
    before = {m.group(1) for m in wrapper.finditer(js)}
    kept = {m.group(1) for m in wrapper.finditer(new)}
    lists = re.findall(r'\[((?:"[\w$]+",?)*)\]\.forEach\(function\(n\)\{', new)
    assert len(lists) == 2
    looped = {"_" + x for x in json.loads("[" + lists[0] + "]")} | set(json.loads("[" + lists[1] + "]"))
    assert kept | looped == before and not kept & looped and len(looped) == n
    assert "_malloc" in kept   # read by the file's own JS
    subprocess.run([NODE, "-e", "new Function(require('fs').readFileSync(0, 'utf8'))"], input=new, text=True,
                   check=True, timeout=120)
