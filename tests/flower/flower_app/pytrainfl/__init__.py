"""pytrain's Flower test app."""
