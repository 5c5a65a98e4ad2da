"""Independent NumPy references of the core formulas, for tests and benchmarks."""
