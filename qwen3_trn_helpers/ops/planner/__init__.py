"""The layout planner: which parallelism for a Qwen3 on N trn2 nodes (``qwen3-trn plan``).

search.py enumerates layouts and keeps those that fit (memory by training/memory.py);
layout.py holds a candidate and ranks them (time by cost.py, on a machine of
machines.py); given.py prices a layout the user names; checks.py verifies the best
against a fake-backend dry run and times candidates; report.py prints the answer.
"""
