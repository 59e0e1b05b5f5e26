"""Layers: products, convolutions, pooling, softmax, dropout, resizing, attention."""
