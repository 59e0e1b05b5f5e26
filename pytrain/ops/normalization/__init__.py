"""Normalization layers: batch, layer, instance, group and RMS normalization."""
