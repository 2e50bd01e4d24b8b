"""nightjar-ray: load-adaptive speculative decoding (Nightjar) for vLLM on Ray Serve."""

__version__ = "0.1.0"
