"""Recurrent layers: RNN, GRU, LSTM."""
