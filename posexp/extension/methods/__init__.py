"""The RoPE context-extension methods of docs/maths.md §3, one module each, found by name.

Each module registers one function with ``register_extension``: it takes a checked ``RopeSpec``
plus its own keyword-only params (whose defaults the registry reads as the method's allowed
params) and returns (float64 inv_freq, attention_factor). Training-free methods, which change
attention instead, register an ``AttentionPlan`` builder with ``register_attention_method``
(posexp/extension/attention.py). A new method is one module here plus
``configs/extension/<name>.yaml``.
"""

import importlib

from posexp.registry import discover

# The built-in methods first, in the order tables and plots show them (plainest first); any
# other module of this package follows, in name order.
_SHOWN_FIRST = (
    "none",
    "pi",
    "ntk",
    "dynamic_ntk",
    "yarn",
    "llama3",
    "longrope",
    "self_extend",
    "rerope",
    "logn",
    "blockwise",
)
for _name in _SHOWN_FIRST:
    importlib.import_module(f"{__name__}.{_name}")
discover(__name__, __path__)
