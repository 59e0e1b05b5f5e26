"""Layers: products, convolutions, pooling, softmax, dropout, resizing, attention."""
from __future__ import annotations
