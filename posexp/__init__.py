"""posexp: experiments on positional encodings with tiny decoder-only transformers."""

from posexp.extension import rope_frequencies

__version__ = "0.1.0"
__all__ = ["rope_frequencies", "__version__"]
