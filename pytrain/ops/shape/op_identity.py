"""Identity: the input itself."""
from __future__ import annotations

from pytrain.ops.registry import kernel


@kernel("Identity")
def identity(ctx, input):
    return (input,)
