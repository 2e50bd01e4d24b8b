"""Research and benchmark scripts (not installed with the package).

Run each from the repository root as ``python benchmarks/<script>.py``; tests import them as
``benchmarks.<script>``. Results go under ``benchmarks/results/`` by default.
"""
