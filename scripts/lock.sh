#!/usr/bin/env bash
# The course's lockfile, requirements/cpu.lock: every package a CPU machine runs the
# notebooks with (the package's dependencies and its `cpu` and `notebooks` extras), each
# pinned to one version and to the sha256 of every wheel PyPI has for it.
#
#   scripts/lock.sh          # resolve again from PyPI (after changing pyproject.toml)
#
# Who reads it: scripts/setup.sh installs with its pins as constraints (a laptop, CI and
# the notebooks' nbval run get the same versions), and docker/lab/Dockerfile installs it
# whole with --require-hashes (the JupyterLab container for laptops that cannot install).
# One resolution for every platform and Python from 3.11 (uv's --universal: markers keep
# a Mac's or a newer Python's pins apart), so a laptop's setup and the container agree.
# Packages of the test and site extras are not in it: CI resolves those around its pins.
set -euo pipefail
cd "$(dirname "$0")/.."
uv="${QWEN3_TRN_VENV:-.venv}/bin/uv"
[ -x "$uv" ] || { echo "error: $uv is missing; run scripts/setup.sh --install-only first" >&2; exit 1; }
# PyPI only, whatever this machine's pip configuration adds: the lock is for everyone
"$uv" pip compile pyproject.toml --extra cpu --extra notebooks --universal \
  --python-version 3.11 --generate-hashes --index-url https://pypi.org/simple \
  --custom-compile-command "scripts/lock.sh" --quiet -o requirements/cpu.lock
echo "wrote requirements/cpu.lock ($(grep -c '==' requirements/cpu.lock) pins)"
