"""Layer 9, a face. ``python -m pytrain``: the pytrain command line."""
from __future__ import annotations

import sys

from pytrain.cli import main

if __name__ == "__main__":
    sys.exit(main())
