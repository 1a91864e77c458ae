#!/usr/bin/env bash
# The whole suite: unit tests, then every notebook executed by nbval. CI runs exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --install-only
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 MPLBACKEND=Agg
exec "${QWEN3_TRN_VENV:-.venv}/bin/python" -m pytest tests notebooks \
  --nbval-lax --nbval-current-env --durations=15 "$@"
