#!/usr/bin/env bash
# The whole suite: unit tests, every notebook executed by nbval, the browser test.
# CI runs exactly this. Independent test files run on all cores (pytest-xdist; a
# notebook's cells stay together in one worker).
#
#   scripts/test.sh            # the suite (6-8.5 minutes on 2 cores from a clean clone,
#                              #   with the machine's speed; the goal is at most 8)
#   scripts/test.sh --fast     # the inner loop: tests not marked slow, no notebooks (nor
#                              #   any install, long or site test, even one not marked slow);
#                              #   `--fast tests/core/model` narrows it to those paths
#   scripts/test.sh --install  # the workshop wheelhouse: built from the package index,
#                              #   installed offline into a new venv (CI runs it after)
#   scripts/test.sh --long     # multi-process and end-to-end checks, compiled-vs-eager runs
#                              #   (a minute or more each; CI's last step)
#   scripts/test.sh --site     # the course's static site: built (notebooks executed),
#                              #   then checked in Chromium (its own CI step)
#   scripts/test.sh -k parity  # any further pytest arguments are passed on
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--site" ]; then
  bash scripts/setup.sh --install-only --site
else
  bash scripts/setup.sh --install-only
fi
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 MPLBACKEND=Agg
py="${QWEN3_TRN_VENV:-.venv}/bin/python"
# Only the suite executes notebooks: the other steps leave nbval out (its import of
# nbformat and jsonschema costs each pytest process about 2 s of CPU)
if [ "${1:-}" = "--fast" ]; then
  shift
  paths=()  # test folders or files named first narrow the subset (CI's Python 3.12 step)
  while [ $# -gt 0 ] && [ -e "$1" ]; do paths+=("$1"); shift; done
  exec "$py" -m pytest "${paths[@]:-tests}" -m "not slow and not site and not install and not long" -p no:nbval \
    -n auto --dist loadfile --no-loadscope-reorder --durations=10 "$@"
fi
if [ "${1:-}" = "--install" ]; then
  shift
  exec "$py" -m pytest tests -m install -p no:nbval -n auto --dist loadfile --no-loadscope-reorder --durations=5 "$@"
fi
if [ "${1:-}" = "--site" ]; then
  shift
  exec "$py" -m pytest tests -m site -p no:xdist -p no:nbval --durations=5 "$@"
fi
if [ "${1:-}" = "--long" ]; then
  shift
  exec "$py" -m pytest tests -m long -p no:nbval -n auto --dist loadfile --no-loadscope-reorder --durations=10 "$@"
fi
exec "$py" -m pytest tests notebooks --nbval-lax --nbval-current-env \
  -m "not install and not site and not long" \
  -n auto --dist loadfile --no-loadscope-reorder --durations=15 "$@"
