"""Layer 7, the offline generator: an inference model to training artifacts: what trains, losses as
blocks, optimizers (adapters from engine.lora), ready-made models and the PyTorch export fit for training."""
from __future__ import annotations
