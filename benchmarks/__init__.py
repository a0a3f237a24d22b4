"""aster-forge benchmarks (``make bench``)."""
