"""Helpers for the qwen3-trn notebooks: device, assets, variants, training, plots.

Import is cheap; torchtitan and transformers load only when a function needs them.
"""

__version__ = "0.1.0"
