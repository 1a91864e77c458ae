#!/usr/bin/env bash
# The course as a static HTML site: every notebook executed (myst-nb) with its outputs,
# and the instructor's kit, in one folder that opens from disk, offline.
#
#   scripts/build_site.sh            # -> build/site/index.html
#   scripts/build_site.sh OUT_DIR    # -> OUT_DIR/index.html
#
# Needs the `site` extra (scripts/setup.sh --site installs it); executes the notebooks,
# so it takes about as long as their nbval run.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
py="${QWEN3_TRN_VENV:-.venv}/bin/python"
out="${1:-build/site}"
src=$(mktemp -d "${TMPDIR:-/tmp}/qwen3-trn-site-src.XXXXXX")
trap 'rm -rf "$src"' EXIT
cp site/conf.py site/index.md "$src/"
cp notebooks/0*.ipynb "$src/"
cp -r notebooks/figures "$src/figures"
cp notebooks/README.md "$src/kit.md"
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 MPLBACKEND=Agg PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"
# notebooks start from their own folder, as in JupyterLab and nbval
"$py" -m sphinx -b html -W --keep-going -q -j 1 "$src" "$out"
echo "site: $out/index.html ($(du -sh "$out" | cut -f1))"
