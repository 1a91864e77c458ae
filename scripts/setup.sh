#!/usr/bin/env bash
# One command: local venv, install, offline assets, then the first check of the machine.
#
#   scripts/setup.sh                 # everything (CPU: the 10-step walkthrough headless;
#                                    #   trn2: the smoke ladder, see docs/trn2.md)
#   scripts/setup.sh --install-only  # just the environment (what scripts/test.sh uses)
#   scripts/setup.sh --cpu-torch     # Linux: PyTorch's CPU-only torch, from its own index
#                                    #   (QWEN3_TRN_TORCH_INDEX=URL: a mirror of that index)
#   scripts/setup.sh --site          # also the `site` extra (Sphinx, myst-nb) for
#                                    #   scripts/build_site.sh and scripts/test.sh --site
#   scripts/setup.sh --wheelhouse DIR  # offline: everything from DIR, made beforehand by
#                                    #   `qwen3-trn wheelhouse DIR` on a machine with network
#   scripts/setup.sh --neuron        # trn2: the Neuron path or nothing (one error line
#                                    #   off trn2 or outside the Neuron venv)
#
# The CPU-only torch is opt-in, not chosen automatically where no GPU is present: CI (which
# reaches only PyPI) and most laptops then install the torch CI tests, and a missing or
# unreachable second index never changes what a plain setup installs. Without a GPU on
# Linux, setup says once that --cpu-torch would skip the CUDA libraries. On macOS PyPI's
# torch is the CPU build already, so --cpu-torch changes nothing there.
#
# On trn2 the first thing to run on the Neuron device is the smoke ladder, not a
# training run: each rung runs in its own process with a timeout and smoke/smoke.json
# records every rung, so a failure is one line with its fix and a file to attach. (A
# training run as setup's last step would fail setup on the first Neuron problem and
# leave no record.) The 64-rank Qwen3-4B rung compiles for a long time; setup leaves it
# out and prints the command.
#
# On trn2, run it from the activated Neuron venv (the DLAMI's
# /opt/aws_neuronx_venv_torch_neuronx_2_14_*). The new .venv then reads that venv's
# packages through a .pth file, so it uses the Neuron build of torch and torch-neuronx,
# and pip is constrained to exactly those versions: it never installs a torch of its
# own. (`python -m venv --system-site-packages` would expose the *base* interpreter's
# site-packages, not the activated venv's, and pip would then bring a CUDA torch.)
# triton comes with the Neuron extra: torchtitan 0.3.0 imports it unconditionally and
# the Neuron torch build does not ship it (AWS's recipe installs it too).
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${QWEN3_TRN_VENV:-.venv}
PYTHON=${PYTHON:-python3}
install_only=0
neuron_only=0
site=0
torch_index=${QWEN3_TRN_TORCH_INDEX:-}
wheelhouse=""
while [ $# -gt 0 ]; do
  case "$1" in
    --install-only) install_only=1 ;;
    --neuron) neuron_only=1 ;;
    --site) site=1 ;;
    --cpu-torch) torch_index=${torch_index:-https://download.pytorch.org/whl/cpu} ;;
    --wheelhouse)
      [ $# -ge 2 ] || { echo "error: --wheelhouse needs a folder (made by qwen3-trn wheelhouse)" >&2; exit 2; }
      wheelhouse=$(cd "$2" 2>/dev/null && pwd) || {
        echo "error: wheelhouse folder $2 does not exist; make it on a machine with network:" \
          "qwen3-trn wheelhouse $2" >&2; exit 2; }
      shift ;;
    *) echo "error: unknown option $1 (scripts/setup.sh [--install-only] [--cpu-torch]" \
         "[--site] [--wheelhouse DIR] [--neuron])" >&2; exit 2 ;;
  esac
  shift
done
case "${QWEN3_TRN_INSTALLER:-uv}" in
  uv|pip) ;;
  *) echo "error: QWEN3_TRN_INSTALLER is ${QWEN3_TRN_INSTALLER}; set it to uv (the default)" \
       "or pip" >&2; exit 2 ;;
esac
if [ -n "$torch_index" ] && [ "$(uname -s)" = Darwin ]; then
  echo "macOS: PyPI's torch is already the CPU-only build; --cpu-torch changes nothing here"
  torch_index=""
fi

neuron_site=""
if "$PYTHON" -c "import torch_neuronx" >/dev/null 2>&1; then
  # every package folder the Neuron interpreter sees (its site-packages, and whatever
  # its own .pth files or --system-site-packages add), in its order
  neuron_site=$("$PYTHON" -c "
import sys
seen = []
for p in sys.path:
    if ('site-packages' in p or 'dist-packages' in p) and p not in seen:
        seen.append(p)
print('\n'.join(seen))")
  # Neuron SDK 2.33 or later (the versions and why: scripts/neuron_versions.py), then the
  # pins: its torch, torch-neuronx and numpy, which nothing the course installs replaces
  neuron_pins=$("$PYTHON" scripts/neuron_versions.py) || exit 2
  echo "Neuron venv detected ($(echo $neuron_pins)): reusing its torch, torch-neuronx and numpy"
fi

# --neuron: the Neuron path or nothing, said in one line before anything is installed
if [ "$neuron_only" = 1 ] && [ -z "$neuron_site" ]; then
  if [ ! -e /dev/neuron0 ] && ! command -v neuron-ls >/dev/null 2>&1; then
    echo "error: --neuron: no Neuron device here (no /dev/neuron0, no neuron-ls): run it" \
      "on a trn2 instance, or run scripts/setup.sh without --neuron for the CPU path" >&2
  else
    echo "error: --neuron: $PYTHON cannot import torch_neuronx: activate the Neuron venv" \
      "(source /opt/aws_neuronx_venv_torch_neuronx_2_14*/bin/activate) and rerun" >&2
  fi
  exit 2
fi

if [ -n "$neuron_site" ] && { [ -n "$wheelhouse" ] || [ -n "$torch_index" ]; }; then
  echo "error: --wheelhouse and --cpu-torch are for CPU machines; from the Neuron venv," \
    "run scripts/setup.sh without them (it uses the Neuron venv's torch)" >&2
  exit 2
fi

if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
fi
py="$VENV/bin/python"

extras="notebooks,test"
[ "$site" = 1 ] && extras="$extras,site"  # only for the site step (scripts/test.sh --site)
constraints=""
lock=""
if [ -n "$neuron_site" ]; then
  own_site=$("$py" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
  if [ -d "$own_site/torch" ]; then
    # a .venv made earlier on the CPU path holds its own torch, which would come before
    # the Neuron venv's on sys.path and hide it
    echo "error: $VENV has its own torch (from a CPU setup); it would hide the Neuron" \
      "venv's. Remove it (rm -rf $VENV) and rerun scripts/setup.sh from the Neuron venv" >&2
    exit 1
  fi
  printf '%s\n' $neuron_site > "$own_site/qwen3_trn_neuron_venv.pth"
  # the Neuron compiler and tools (neuronx-cc, ...) live in the Neuron venv's bin, and
  # torch-neuronx finds neuronx-cc on PATH: link them, so .venv/bin works on its own
  neuron_bin=$(dirname "$("$PYTHON" -c 'import sys; print(sys.executable)')")
  for tool in "$neuron_bin"/neuron*; do
    [ -e "$tool" ] && [ ! -e "$VENV/bin/$(basename "$tool")" ] && ln -s "$tool" "$VENV/bin/"
  done
  # `qwen3-trn reproduce --stack torchtitan-neuron` runs AWS's fork in this interpreter
  "$PYTHON" -c 'import sys; print(sys.executable)' > "$VENV/neuron-python"
  constraints="$VENV/neuron-constraints.txt"
  printf '%s\n' $neuron_pins > "$constraints"
  extras="$extras,neuron"
else
  extras="cpu,$extras"
  # the lockfile's pins as constraints: a laptop, CI and the JupyterLab image (which
  # installs requirements/cpu.lock whole, hashes checked) get the same versions. The
  # hashes stay out here: one hashed constraint turns on pip's hash checking for the
  # whole install, and the editable package has no file to hash
  lock=requirements/cpu.lock
  constraints="$VENV/cpu-lock-pins.txt"
  grep -v '^[[:space:]]*--hash=' "$lock" | sed 's/[[:space:]]*\\$//' > "$constraints"
fi

published=""
if [ -n "$wheelhouse" ]; then
  # offline: check the wheelhouse against its manifest (a missing or changed file, another
  # Python or platform is one line, with the fix) before pip sees it
  checked=$("$py" -m qwen3_trn_helpers.ops.wheelhouse verify "$wheelhouse") || exit 1
  requirement=$(echo "$checked" | sed -n 1p)
  published=$(echo "$checked" | sed -n 2p)
  # what it installs is the wheelhouse's choice, made when it was built
  wanted_site=$site
  extras=$(echo "$requirement" | sed -n 's/^[^[]*\[\([^]]*\)\].*/\1/p')
  if [ "$wanted_site" = 1 ] && [[ ",$extras," != *",site,"* ]]; then
    echo "error: --site: the wheelhouse $wheelhouse holds no Sphinx (its requirement is" \
      "$requirement); install the site extra from the package index instead:" \
      "scripts/setup.sh --install-only --site" >&2
    exit 2
  fi
fi

# pip runs with --no-compile and the install ends in one byte-compilation on every core
# instead: pip's own compiles the ~19,500 .py files it installs one after another (about
# 111 s of CPU on a 2-core Zen 4); compileall -j 0 does the same in 37 s there. Leaving
# compilation to the first import is no saving: where PYTHONDONTWRITEBYTECODE is set (as
# on the machines this was measured on) nothing is ever cached, and every process (each rank, notebook kernel
# and test worker) compiled the 3,783 modules a run imports again, 8 s of its start.
nocompile="--no-compile"
# (the paths in site-packages compileall leaves out; see the compile below)
compile_skip='(.+/)?tests?/|transformers/models/(?!auto/|encoder_decoder/|qwen2/|qwen3/|qwen3_moe/)[^/]+/'

# Reinstall only when pyproject.toml (or the Neuron pins, the torch index, the
# wheelhouse, the checkout: the package is installed editable, from this folder) changed
# since the last install, or an extra is asked for that it lacks (`--site` after a plain
# install). The stamp holds that hash, then the extras installed.
stamp="$VENV/.qwen3-trn-installed"
# (hashed by Python: macOS has no sha256sum)
want=$({ cat pyproject.toml
  if [ -n "$lock" ]; then cat "$lock"; elif [ -n "$constraints" ]; then cat "$constraints"; fi
  echo "checkout: $(pwd -P)"
  if [ -n "$torch_index" ]; then echo "torch index: $torch_index"; fi
  if [ -n "$wheelhouse" ]; then cat "$wheelhouse/manifest.json"; fi; } \
  | "$py" -c "import hashlib, sys; print(hashlib.sha256(sys.stdin.buffer.read()).hexdigest())")
had=$(sed -n 1p "$stamp" 2>/dev/null || true)
had_extras=""
[ "$had" = "$want" ] && had_extras=$(sed -n 2p "$stamp" 2>/dev/null || true)
lacking=""
set -f  # the extras are words, never file patterns
for extra in ${extras//,/ }; do
  case ",$had_extras," in *",$extra,"*) ;; *) lacking="$lacking $extra" ;; esac
done
set +f
if [ "$had" != "$want" ] || [ -n "$lacking" ]; then
  if [ -n "$wheelhouse" ]; then
    # --isolated: no pip configuration or PIP_* variable adds an index or a find-links
    # folder; everything comes from the wheelhouse or the install fails
    echo "installing offline: pip install --no-index --find-links $wheelhouse/wheels $requirement"
    if ! "$py" -m pip install --quiet $nocompile --isolated --no-index --only-binary=:all: \
        --find-links "$wheelhouse/wheels" "$requirement"; then
      echo "error: the wheelhouse $wheelhouse lacks a wheel this install needs (pip's" \
        "ERROR above names it); rebuild it on a machine with network:" \
        "qwen3-trn wheelhouse DIR, with the options in its manifest.json (\"command\")" >&2
      exit 1
    fi
    "$py" -m qwen3_trn_helpers.ops.wheelhouse install-assets "$wheelhouse"
  else
    torch_version=$("$py" -c "import importlib.metadata as m; print(m.version('torch'))" \
      2>/dev/null || true)
    if [ -n "$torch_index" ]; then
      pin=$("$py" -c "
import re, tomllib
cpu = tomllib.load(open('pyproject.toml', 'rb'))['project']['optional-dependencies']['cpu']
print(next(r for r in cpu if re.match(r'torch\s*==', r)).replace(' ', ''))")
      if [ -n "$torch_version" ] && [ "${torch_version%+cpu}" = "$torch_version" ]; then
        echo "error: $VENV already has torch $torch_version (PyPI's, with CUDA libraries);" \
          "remove it (rm -rf $VENV) and rerun scripts/setup.sh --cpu-torch" >&2
        exit 1
      fi
      if [ -z "$torch_version" ]; then
        echo "installing: pip install --index-url $torch_index $pin+cpu (PyPI for the rest)"
        if ! err=$("$py" -m pip install --quiet $nocompile --no-deps --index-url "$torch_index" \
            "$pin+cpu" 2>&1); then
          echo "error: could not install $pin+cpu from $torch_index" \
            "($(echo "$err" | grep -E '^ERROR' | head -n 1)); check the network to it, or" \
            "run scripts/setup.sh without --cpu-torch for PyPI's torch" >&2
          exit 1
        fi
      fi
    elif [ -z "$torch_version" ] && [ -z "$neuron_site" ] && [ "$(uname -s)" = Linux ] \
        && ! ls /dev/nvidia0 >/dev/null 2>&1; then
      echo "note: no NVIDIA GPU here; scripts/setup.sh --cpu-torch would install PyTorch's" \
        "CPU-only torch instead of PyPI's (which brings 3.2 GB of CUDA libraries)"
    fi
    # The default install (PyPI's torch) goes through uv, pinned and bootstrapped by pip:
    # the same packages in about a third of pip's time, with every pip setting passed on,
    # or pip where a setting has no uv equivalent (qwen3_trn_helpers/ops/installer.py says
    # why). uv's cache lives in the venv (unless UV_CACHE_DIR says otherwise): its files
    # are hard-linked into site-packages, so it costs no disk beyond the venv, and
    # rm -rf $VENV removes both. QWEN3_TRN_INSTALLER=pip keeps pip.
    installed_by=""
    if [ -z "$neuron_site" ] && [ -z "$torch_index" ] && [ "${QWEN3_TRN_INSTALLER:-uv}" != pip ]; then
      uv_out=$("$py" -m pip config list 2>/dev/null \
        | "$py" -m qwen3_trn_helpers.ops.installer uv-options) && uv_status=0 || uv_status=$?
      if [ "$uv_status" = 0 ]; then
        uv_pin=$("$py" -m qwen3_trn_helpers.ops.installer requirement)
        uv_args=()
        while IFS= read -r option; do uv_args+=("$option"); done <<< "$uv_out"
        if ! boot=$("$py" -m pip install --quiet $nocompile "$uv_pin" 2>&1); then
          echo "note: could not install $uv_pin ($(echo "$boot" | grep -E '^ERROR' | tail -n 1)); installing with pip"
        else
          echo "installing: uv pip install -c $lock -e .[$extras] (pip's settings passed on)"
          if UV_CACHE_DIR=${UV_CACHE_DIR:-$VENV/.uv-cache} "$VENV/bin/uv" pip install \
              --quiet --python "$py" "${uv_args[@]}" -c "$constraints" -e ".[$extras]"; then
            installed_by=uv
          else
            echo "note: uv could not install it (its error above); trying pip"
          fi
        fi
      elif [ "$uv_status" = 3 ]; then
        echo "note: $uv_out; installing with pip (the same packages, about 3x slower)"
      else
        echo "note: setup could not read pip's configuration; installing with pip"
      fi
    fi
    if [ -z "$installed_by" ]; then
      echo "installing: pip install ${constraints:+-c $constraints }-e .[$extras]"
      # its output to a log and one line here (no network, a full disk): rerun picks up,
      # as the stamp below is written only once everything is installed
      log="$VENV/pip-install.log"
      if ! "$py" -m pip install --quiet $nocompile ${constraints:+-c "$constraints"} -e ".[$extras]" \
          > "$log" 2>&1; then
        why=$(grep -E '^[[:space:]]*ERROR' "$log" 2>/dev/null | tail -n 1 | sed 's/^[[:space:]]*//')
        fix="connect to the network (pip config list shows the index), or install offline:"
        fix="$fix scripts/setup.sh --wheelhouse DIR (docs/install.md)"
        grep -q "No space left on device" "$log" 2>/dev/null && fix="free some disk space"
        echo "error: pip could not install the package (${why:-no error line}); $fix; then" \
          "rerun scripts/setup.sh (pip's output: $log)" >&2
        exit 1
      fi
    fi
  fi
  site_packages=$("$py" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
  echo "byte-compiling $site_packages (every core)"
  # Left out: the test suites packages ship (tests/ and test/ folders: 2,915 files here)
  # and transformers' other model families (2,579 files): a full suite run imported
  # none of them (6,949 of the 19,516 files were read), and leaving them out takes the
  # compile from 29.6 to 20.4 s (2-core Zen 4, median of 2 pairs). A file left out that
  # something does import is compiled when imported, as without this step. (Anchored
  # at site-packages: a checkout under a folder named test/ is still compiled whole.)
  skip=$("$py" -c 'import re, sys; print("^" + re.escape(sys.argv[1]) + "/(" + sys.argv[2] + ")")' \
    "$site_packages" "$compile_skip")
  # (|| true: a few packages ship files for newer Pythons only, e.g. torch's py312 tests)
  "$py" -m compileall -qq -j 0 -x "$skip" "$site_packages" || true
  # extras installed before with the same pyproject.toml stay installed: keep them listed
  installed=$extras
  set -f
  for extra in ${had_extras//,/ }; do
    case ",$installed," in *",$extra,"*) ;; *) installed="$installed,$extra" ;; esac
  done
  set +f
  printf '%s\n%s\n' "$want" "$installed" > "$stamp"
fi

# Where triton cannot be installed (macOS, Windows) torchtitan's own entry point needs
# our stand-in for its import of triton before it imports anything: a .pth start-up
# hook (qwen3_trn_helpers/without_triton.py); removed again where triton is present.
hook=$("$py" -c "from qwen3_trn_helpers import without_triton as w; print(w.write_pth() or '')")
[ -n "$hook" ] && echo "triton is not installable here: torchtitan's import of it stood in for ($hook)"

# (from a wheelhouse: the assets it brought, verified against their checksums)
"$VENV/bin/qwen3-trn" assets ${published:+--published}
[ "$install_only" = 1 ] && exit 0

# The main job: the seed's experiment in miniature, AWS's 10 steps from the published
# weights and from random init with the same data and settings, then one figure with both
# curves beside AWS's step-1 losses (6.54, 12.43) and three lines. On a CPU the tiny
# preset and its local "published" checkpoint (made here once, cached); on trn2 the same
# command runs the real sizes (Qwen3-4B on 64 ranks). Whatever stops it ends in one line,
# and setup run again picks up there: the install, the assets and the checkpoint are
# kept, and so is each run that finished (lessons/reproduction.py kept_run).
main_job=("$VENV/bin/qwen3-trn" reproduce --variant native --out runs/reproduce --brief)

if [ -n "$neuron_site" ]; then
  echo "Neuron venv: climbing the smoke ladder (each rung in its own process; smoke/smoke.json)"
  status=0
  "$VENV/bin/qwen3-trn" smoke --no-full-size --out smoke || status=$?
  if [ "$status" = 0 ]; then
    echo "next: $VENV/bin/qwen3-trn smoke --rung 4b_native_64ranks   (64 ranks, compiles for minutes)"
    echo "then: ${main_job[*]}   (the main job a CPU setup runs, at the real sizes)"
  else
    echo "setup installed everything, but the smoke ladder failed: read the fix on each" \
      "failed rung above; attach smoke/smoke.json to a bug report" >&2
  fi
  exit "$status"
fi

export HF_HUB_OFFLINE=${HF_HUB_OFFLINE:-1}
"${main_job[@]}"
echo "next: the course, notebooks 00 to 06: $VENV/bin/jupyter lab notebooks/ (start with" \
  "00_preflight.ipynb; 03 explains this figure)"
