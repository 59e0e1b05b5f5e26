"""Shape and data movement: reshapes, slicing, gathering and scattering, padding, constants."""
