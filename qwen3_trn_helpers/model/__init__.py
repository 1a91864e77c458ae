"""The model layer: Qwen3's shapes and presets, the three variants (torchtitan's native
model, the transformers backend, the MoE with blockwise NKI-style experts) and their
registry, attention, and Hugging Face checkpoints. Imports nothing above it; torch loads
only when a function needs it."""
