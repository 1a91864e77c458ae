"""The layout planner: which parallelism for a Qwen3 on N trn2 nodes (``qwen3-trn plan``).

search.py enumerates and ranks layouts (memory by training/memory.py, time by cost.py);
checks.py verifies the best against a fake-backend dry run and times candidates.
"""
