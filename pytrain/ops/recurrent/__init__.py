"""Recurrent layers: RNN, GRU, LSTM."""
from __future__ import annotations
