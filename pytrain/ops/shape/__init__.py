"""Shape and data movement: reshapes, slicing, gathering and scattering, padding, constants."""
from __future__ import annotations
