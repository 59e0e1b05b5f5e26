"""Normalization layers: batch, layer, instance, group and RMS normalization."""
from __future__ import annotations
