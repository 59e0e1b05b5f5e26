"""pytrain's layers, read from its imports: every ``import`` of every module of pytrain/ (at module
level and inside functions) points down the layer order below or stays in its layer; no two
modules import each other (directly or round a cycle); no two rooms (``pytrain.<x>``) import each
other. Each failure names the importing module and the import."""
from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Dict, List, Optional, Set, Tuple

PKG = Path(__file__).resolve().parents[1] / "pytrain"

#: each room says its layer where it is defined: the first words of its docstring (a package's __init__ or a
#: module at pytrain/'s top) are "Layer N, ...", lowest first (the order of the README's "How the code is laid out")
LAYER_LINE = re.compile(r"^Layer (\d+)\b")


def _declared_layers() -> Dict[str, Optional[int]]:
    found: Dict[str, Optional[int]] = {}
    for path in sorted(PKG.iterdir()):
        source = path / "__init__.py" if path.is_dir() else path
        if path.name == "__init__.py" or not source.is_file() or source.suffix != ".py":
            continue
        doc = ast.get_docstring(ast.parse(source.read_text(encoding="utf-8"))) or ""
        m = LAYER_LINE.match(doc)
        found[path.stem if path.is_file() else path.name] = int(m.group(1)) if m else None
    return found


DECLARED = _declared_layers()
LAYER = {room: n for room, n in DECLARED.items() if n is not None}

Edge = Tuple[str, str, int]   # (imported module, the import as written, line)


def _modules() -> Dict[str, Path]:
    mods = {}
    for path in PKG.rglob("*.py"):
        parts = ("pytrain",) + path.relative_to(PKG).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = path
    return mods


MODULES = _modules()


def _target(name: str) -> Optional[str]:
    """The pytrain module ``name`` lives in (a name imported from a module is that module)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _imports(module: str, path: Path) -> List[Edge]:
    is_package = path.name == "__init__.py"
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [(a.name, "import " + a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = module.split(".")
                parts = parts[:len(parts) - node.level + (1 if is_package else 0)]
                base = ".".join(parts + ([node.module] if node.module else []))
            written = "from %s%s import " % ("." * node.level, node.module or "")
            names = [(base + "." + a.name, written + a.name) for a in node.names]
        else:
            continue
        for full, written in names:
            target = _target(full)
            if target is not None and target != module and target.startswith("pytrain"):
                out.append((target, written, node.lineno))
    return out


EDGES: Dict[str, List[Edge]] = {m: _imports(m, p) for m, p in MODULES.items()}


def _room(module: str) -> str:
    return ".".join(module.split(".")[:2])


def _layer(module: str) -> Optional[int]:
    parts = module.split(".")
    return LAYER.get(parts[1]) if len(parts) > 1 else None


def _where(module: str, edge: Edge) -> str:
    return "%s:%d `%s` (-> %s)" % (MODULES[module].relative_to(PKG.parent), edge[2], edge[1], edge[0])


def _cycles(graph: Dict[str, Set[str]]) -> List[List[str]]:
    """Strongly connected components of more than one node (Tarjan, iterative)."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on: Set[str] = set()
    found = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def test_the_layer_order_knows_every_room():
    rooms = {_room(m) for m in MODULES if m != "pytrain"}
    unknown = sorted(r for r in rooms if r.split(".")[1] not in LAYER)
    assert not unknown, ("rooms of pytrain/ whose docstring does not begin with 'Layer N, ...' (say each one's "
                         "layer): %s" % ", ".join(unknown))


def test_no_import_points_up():
    upward = ["%s: layer %d imports layer %d" % (_where(m, e), _layer(m), _layer(e[0]))
              for m, edges in sorted(EDGES.items()) for e in edges
              if _layer(m) is not None and _layer(e[0]) is not None and _layer(e[0]) > _layer(m)]
    assert not upward, "imports against the layer order:\n" + "\n".join(upward)


def test_no_module_cycle():
    graph = {m: {e[0] for e in edges} for m, edges in EDGES.items()}
    # a package importing its own submodules (pytrain.x -> pytrain.x.y) is how a package is built
    cycles = [c for c in _cycles(graph) if not all(x.startswith(c[0] + ".") for x in c[1:])]
    lines = []
    for c in cycles:
        members = set(c)
        lines.append(" <-> ".join(c) + ":\n    " + "\n    ".join(
            _where(m, e) for m in c for e in EDGES[m] if e[0] in members))
    assert not cycles, "modules that import each other:\n" + "\n".join(lines)


def test_no_two_rooms_import_each_other():
    graph: Dict[str, Set[str]] = {}
    for m, edges in EDGES.items():
        if m == "pytrain":   # the package's face (pytrain/__init__.py) re-exports; it is no room
            continue
        graph.setdefault(_room(m), set()).update(
            _room(e[0]) for e in edges if _room(e[0]) not in (_room(m), "pytrain"))
    cycles = _cycles(graph)
    lines = []
    for c in cycles:
        members = set(c)
        lines.append(" <-> ".join(c) + ":\n    " + "\n    ".join(
            _where(m, e) for m, edges in sorted(EDGES.items()) if m != "pytrain" and _room(m) in members
            for e in edges if _room(e[0]) in members and _room(e[0]) != _room(m)))
    assert not cycles, "rooms that import each other:\n" + "\n".join(lines)


def test_the_readme_draws_the_rooms_where_they_declare_their_layer():
    """README "How the code is laid out": each table row "| N name | rooms |" lists exactly the rooms whose
    docstring says Layer N."""
    readme = (PKG.parent / "README.md").read_text(encoding="utf-8")
    drawn: Dict[int, Set[str]] = {}
    for m in re.finditer(r"^\| (\d+) [^|]+\| ([^|]+)\|", readme, re.M):
        cell = m.group(2).split(";")[0] + (m.group(2).split(";")[1] if ";" in m.group(2) else "")
        rooms = set(re.findall(r"`([a-z_]+)/?`", re.sub(r"\([^)]*\)", "", cell)))
        drawn[int(m.group(1))] = rooms
    declared: Dict[int, Set[str]] = {}
    for room, n in LAYER.items():
        declared.setdefault(n, set()).add(room)
    assert drawn == declared
