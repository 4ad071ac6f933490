"""ppspec: EAGLE3-family speculative decoding under pipeline parallelism on vLLM, checked before launch."""

__version__ = "0.1.0"
