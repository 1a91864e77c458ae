#!/usr/bin/env bash
# One command: local venv, install, offline assets, then the 10-step walkthrough headless.
#
#   scripts/setup.sh                 # everything (CPU: tiny Qwen3; trn2: see README)
#   scripts/setup.sh --install-only  # just the environment (what scripts/test.sh uses)
#
# On trn2, run it from the activated Neuron venv: the new venv then sees that venv's
# torch and torch-neuronx (--system-site-packages) and pip is pinned to them, so they are
# never reinstalled.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${QWEN3_TRN_VENV:-.venv}
PYTHON=${PYTHON:-python3}
install_only=0
[ "${1:-}" = "--install-only" ] && install_only=1

neuron_torch=""
if "$PYTHON" -c "import torch_neuronx" >/dev/null 2>&1; then
  neuron_torch=$("$PYTHON" -c "import torch; print(torch.__version__)")
fi

if [ ! -x "$VENV/bin/python" ]; then
  if [ -n "$neuron_torch" ]; then
    echo "Neuron venv detected (torch $neuron_torch): reusing its torch and torch-neuronx"
    "$PYTHON" -m venv --system-site-packages "$VENV"
  else
    "$PYTHON" -m venv "$VENV"
  fi
fi
py="$VENV/bin/python"

# Reinstall only when pyproject.toml changed since the last install into this venv.
stamp="$VENV/.qwen3-trn-installed"
want=$(sha256sum pyproject.toml | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  if [ -n "$neuron_torch" ]; then
    constraints=$(mktemp)
    echo "torch==$neuron_torch" > "$constraints"
    "$py" -m pip install --quiet -c "$constraints" -e ".[notebooks,test]"
    rm -f "$constraints"
  else
    "$py" -m pip install --quiet -e ".[cpu,notebooks,test]"
  fi
  echo "$want" > "$stamp"
fi

"$VENV/bin/qwen3-trn" assets
[ "$install_only" = 1 ] && exit 0

export HF_HUB_OFFLINE=${HF_HUB_OFFLINE:-1}
"$VENV/bin/qwen3-trn" train --variant native --steps 10 --local-batch-size 1 \
  --init random --out runs/walkthrough --overwrite
