#!/usr/bin/env python3
"""Build and serve the pytrain static site (stdlib + pytrain only).

    python build.py                      build build/dist/*.whl and build/site/
    python build.py --pyodide URL_OR_DIR use another Pyodide distribution
    python build.py serve [--port N]     build if needed, then serve build/site/ on 127.0.0.1
    python build.py serve --flower URL   ... and the Flower SuperLink at URL under /flower/ (the page's
                                         "Join a federation" talks to it through the page's own origin)
    python build.py serve --no-isolation ... without COOP/COEP: no helper threads, every product on one core
    python build.py test [PYTEST ARGS]   install the test dependencies, build, run the whole suite

The site is plain files: the web app (web/), assets (static/), the pytrain wheel, the
Pyodide files the page needs, the MNIST digits as a compact binary and demo training
artifacts generated here with pytrain itself.
"""
from __future__ import annotations

import argparse
import sys
from typing import Iterable, Optional

# The parts live in buildsite/ (one module per job); these names stay importable from ``build``.
from buildsite.assets import MNIST_MAGIC, build_demo_artifacts, cached_mnist, convert_mnist
from buildsite.bytecode import (PY38_CANDIDATES, PYC_BUNDLE_MAGIC, build_python_zip,
                                build_startup_bytecode, pyodide_package_files)
from buildsite.installs import TEST_REQUIREMENTS, ensure_chromium, ensure_python_packages, run_tests
from buildsite.paths import BUILD, DIST, MNIST_NPM, PYODIDE_NPM, ROOT, SITE, STARTUP_MODULES, log
from buildsite.pyodide import (PYODIDE_PACKAGES, PYODIDE_START_PACKAGES, copy_pyodide,
                               ensure_node_modules, pyodide_file_list)
from buildsite.server import MIME, SiteHandler, make_server, serve_in_thread
from buildsite.compress import precompress
from buildsite.site import SW_VERSION_PLACEHOLDER, build, needs_build, site_hash
from buildsite.wheel import build_wheel, pytrain_version

__all__ = [
    "BUILD", "DIST", "MIME", "MNIST_MAGIC", "MNIST_NPM", "PY38_CANDIDATES", "PYC_BUNDLE_MAGIC",
    "PYODIDE_NPM", "PYODIDE_PACKAGES", "PYODIDE_START_PACKAGES", "ROOT", "SITE", "STARTUP_MODULES",
    "SW_VERSION_PLACEHOLDER", "SiteHandler", "TEST_REQUIREMENTS", "build", "build_demo_artifacts",
    "build_python_zip", "build_startup_bytecode", "build_wheel", "cached_mnist", "convert_mnist",
    "copy_pyodide", "ensure_node_modules", "ensure_chromium", "ensure_python_packages",
    "log", "make_server", "needs_build", "precompress", "pyodide_file_list", "pyodide_package_files", "pytrain_version",
    "run_tests", "serve_in_thread", "site_hash", "main",
]


def main(argv: Optional[Iterable[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", nargs="?", default="build", choices=("build", "serve", "test"))
    parser.add_argument("--pyodide", metavar="URL_OR_DIR",
                        help="Pyodide distribution: a folder to copy in, or a URL used as indexURL")
    parser.add_argument("--port", type=int, default=8000, help="port for `serve` (default 8000, 0 = any free port)")
    parser.add_argument("--no-artifacts", action="store_true", help="skip the demo artifacts (the page builds them)")
    parser.add_argument("--force", action="store_true", help="`serve`: rebuild even when the site is up to date")
    parser.add_argument("--flower", metavar="URL", help="`serve`: also serve this Flower SuperLink's Fleet API "
                        "(e.g. http://127.0.0.1:9095) at /flower/, for the page's \"Join a federation\"")
    parser.add_argument("--no-isolation", action="store_true", help="`serve`: no COOP/COEP headers (the page is "
                        "not cross-origin isolated, so every product runs on the worker's own thread)")
    args, rest = parser.parse_known_args(list(argv) if argv is not None else None)
    if args.command == "test":
        return run_tests(rest)
    if rest:
        parser.error("unrecognized arguments: %s" % " ".join(rest))
    # the demo artifacts are made with pytrain, which needs numpy
    ensure_python_packages(["numpy"], ["numpy"])

    if args.command == "build" or args.force or needs_build(SITE, args.pyodide, not args.no_artifacts):
        build(pyodide=args.pyodide, artifacts=not args.no_artifacts)
    if args.command == "serve":
        server = make_server(SITE, args.port, quiet=False, flower=args.flower, isolated=not args.no_isolation)
        print("Serving %s at http://127.0.0.1:%d/  (Ctrl+C to stop)" % (SITE, server.server_address[1]), flush=True)
        if args.flower:
            print("  and the Flower SuperLink %s at /flower/" % args.flower, flush=True)
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
