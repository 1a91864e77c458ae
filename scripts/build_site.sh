#!/usr/bin/env bash
# The course as two static HTML sites from one build, each a folder that opens from
# disk, offline:
#
#   OUT/student/index.html      the student page (notebooks/README.md) and the notebooks,
#                               executed (myst-nb), with their figures and self-checks,
#                               and the reference pages (docs/, under "Reference"); no
#                               answer key, no instructor's kit
#   OUT/instructor/index.html   the instructor's kit (notebooks/INSTRUCTOR.md): plans,
#                               answers, the trn2 day; hand it to instructors only (not
#                               built from the student kit, which has no kit)
#
#   scripts/build_site.sh            # OUT = build/site
#   scripts/build_site.sh OUT_DIR
#   scripts/build_site.sh --docs [OUT_DIR]   # the reference pages alone: OUT/docs/reference.html
#
# --docs builds docs/*.md (and site/reference.md, their table of contents) with the same
# configuration and checks, without the notebooks: seconds, not the notebooks' run. Both
# builds stop on any warning (-W), so a link between pages to a missing page or heading
# fails them.
# Needs the `site` extra (scripts/setup.sh --site installs it); executes the notebooks
# once (the student site), one per core at a time as their nbval run does (Sphinx -j;
# QWEN3_TRN_SITE_JOBS=1 builds one at a time), so it takes about as long as that run.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
py="${QWEN3_TRN_VENV:-.venv}/bin/python"
kinds="student instructor"
if [ "${1:-}" = "--docs" ]; then
  kinds="docs"
  shift
fi
out="${1:-build/site}"
src=$(mktemp -d "${TMPDIR:-/tmp}/qwen3-trn-site-src.XXXXXX")
trap 'rm -rf "$src"' EXIT
# the student kit (scripts/student_kit.sh) has no instructor's kit to build
[ -f notebooks/INSTRUCTOR.md ] || [ "$kinds" = docs ] || kinds=student
for kind in $kinds; do
  mkdir -p "$src/$kind"
  cp site/conf.py site/mathml.py "$src/$kind/"
  cp -r notebooks/figures "$src/$kind/figures"
done
# the reference pages: docs/*.md under docs/, their table of contents beside the index
for kind in $kinds; do
  if [ "$kind" != instructor ]; then
    mkdir -p "$src/$kind/docs"
    cp docs/*.md "$src/$kind/docs/"
    cp site/reference.md "$src/$kind/"
  fi
done
if [ "$kinds" != docs ]; then
  cp site/index.md notebooks/0*.ipynb "$src/student/"
  cp notebooks/README.md "$src/student/course.md"
  [ "$kinds" = student ] || cp notebooks/INSTRUCTOR.md "$src/instructor/index.md"
fi
# progress bars render as a frozen first frame ("0/46") on a static page: none at all
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 MPLBACKEND=Agg \
  HF_HUB_DISABLE_PROGRESS_BARS=1 TQDM_DISABLE=1 \
  PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"
# notebooks start from their own folder, as in JupyterLab and nbval
for kind in $kinds; do
  QWEN3_TRN_SITE_KIND=$kind "$py" -m sphinx -b html -W --keep-going -q -j "${QWEN3_TRN_SITE_JOBS:-auto}" -d "$src/$kind.doctrees" \
    "$src/$kind" "$out/$kind"
done
if [ "$kinds" = docs ]; then
  echo "reference pages: $out/docs/reference.html ($(du -sh "$out/docs" | cut -f1))"
  exit 0
fi
echo "student site: $out/student/index.html ($(du -sh "$out/student" | cut -f1))"
[ "$kinds" = student ] || echo "instructor's kit: $out/instructor/index.html" \
  "($(du -sh "$out/instructor" | cut -f1))"
