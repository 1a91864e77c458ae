"""What keeps the README test command's setup short (scripts/setup.sh).

pip byte-compiles every .py file it installs one after another unless told not to:
about 19,500 files here, measured at ~111 s of CPU on a 2-core box. Every pip install in
setup.sh passes ``--no-compile``, and the install ends in one ``compileall`` on every
core (37 s there). Not compiling at all is no saving: under PYTHONDONTWRITEBYTECODE
nothing is cached, and every process compiled what it imported again (the trainer's
import took 17 s instead of 9).
"""

from __future__ import annotations

import re
from pathlib import Path

SETUP = Path(__file__).resolve().parents[3] / "scripts" / "setup.sh"


def _pip_installs(text: str) -> list[str]:
    """Each command line of setup.sh that runs ``pip install`` (not its echo lines)."""
    lines = [line for line in text.splitlines() if not line.lstrip().startswith(("#", "echo"))]
    return [line for line in lines if re.search(r"-m pip install\b", line)]


def test_every_pip_install_in_setup_skips_byte_compilation():
    text = SETUP.read_text()
    installs = _pip_installs(text)
    # the wheelhouse, the CPU-only torch, uv itself, the package with pip
    assert len(installs) == 4
    assert re.search(r'^nocompile="--no-compile"$', text, re.M)
    for line in installs:
        assert "$nocompile" in line, line


def test_uv_installs_without_byte_compiling_and_before_the_one_compile():
    """uv compiles only when asked (``--compile-bytecode``); the compile comes after."""
    lines = SETUP.read_text().splitlines()
    uv_installs = [i for i, ln in enumerate(lines) if re.search(r'/bin/uv" pip install\b', ln)]
    assert len(uv_installs) == 1
    assert "compile" not in " ".join(lines[uv_installs[0] : uv_installs[0] + 2])
    compile_line = next(i for i, ln in enumerate(lines) if "-m compileall" in ln)
    assert uv_installs[0] < compile_line


def test_the_install_ends_in_one_byte_compilation_on_every_core():
    lines = SETUP.read_text().splitlines()
    compiles = [i for i, line in enumerate(lines) if "-m compileall" in line]
    assert len(compiles) == 1
    line = lines[compiles[0]]
    assert "-j 0" in line and '"$site_packages"' in line
    assert "purelib" in "\n".join(lines[compiles[0] - 12 : compiles[0]])
    last_install = max(i for i, ln in enumerate(lines) if re.search(r"-m pip install\b", ln))
    assert compiles[0] > last_install  # after every pip install, inside the install block
    stamp_write = next(i for i, ln in enumerate(lines) if '> "$stamp"' in ln)
    assert compiles[0] < stamp_write  # an interrupted compile is redone by the next setup


def _compile_skip(site_packages: str) -> re.Pattern[str]:
    """The regex setup.sh hands ``compileall -x``, built as setup.sh builds it."""
    import subprocess
    import sys

    text = SETUP.read_text()
    skip = re.search(r"^compile_skip='([^']+)'$", text, re.M).group(1)
    code = re.search(r"skip=\$\(\"\$py\" -c '([^']+)'", text).group(1)
    out = subprocess.run(
        [sys.executable, "-c", code, site_packages, skip], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    return re.compile(out.stdout.strip())


def test_the_compile_leaves_out_test_suites_and_other_model_families_only():
    sp = "/home/me/test/qwen3-trn/.venv/lib/python3.11/site-packages"
    skip = _compile_skip(sp)
    for left_out in ("pandas/tests/frame/test_api.py", "torch/utils/data/test/x.py",
                     "transformers/models/llama/modeling_llama.py",
                     "transformers/models/qwen3_next/modeling_qwen3_next.py"):  # fmt: skip
        assert skip.search(f"{sp}/{left_out}"), left_out
    for kept in ("torch/nn/modules/linear.py", "torch/testing/_comparison.py",
                 "transformers/models/__init__.py", "transformers/models/auto/modeling_auto.py",
                 "transformers/models/qwen3/modeling_qwen3.py",
                 "transformers/models/qwen3_moe/modeling_qwen3_moe.py",
                 "torchtitan/models/qwen3/model.py"):  # fmt: skip
        assert not skip.search(f"{sp}/{kept}"), kept  # (under a folder named test/)


def test_nothing_a_run_imports_is_left_uncompiled():
    """Every module this test process has imported from site-packages (the trainer,
    transformers' Qwen3, and whatever the tests before it used) is compiled by setup."""
    import sys
    import sysconfig

    import transformers.models.qwen3.modeling_qwen3  # noqa: F401
    import transformers.models.qwen3_moe.modeling_qwen3_moe  # noqa: F401

    import qwen3_trn_helpers.training.trainer  # noqa: F401

    sp = sysconfig.get_paths()["purelib"]
    skip = _compile_skip(sp)
    files = [f for m in list(sys.modules.values())
             if (f := getattr(m, "__file__", None)) and f.startswith(sp + "/")]  # fmt: skip
    assert len(files) > 2000
    assert [f for f in files if skip.search(f)] == []


def test_the_main_job_is_one_process_that_a_rerun_does_not_redo():
    """Setup's main job (issue 49: with the install at most 3 minutes on 2 cores from
    empty caches) is one ``qwen3-trn reproduce``: torch and torchtitan are imported once
    for the local checkpoint and both runs. Without --overwrite, so setup run again keeps
    the runs that finished; nothing else trains on the CPU path."""
    text = SETUP.read_text()
    job = re.search(r'^main_job=\(("\$VENV/bin/qwen3-trn" [^)]*)\)$', text, re.M)
    assert job, "setup.sh names its main job once, as main_job=(...)"
    words = job.group(1).split()
    assert words[1] == "reproduce" and "--brief" in words and "--overwrite" not in words
    assert [ln.strip() for ln in text.splitlines()].count('"${main_job[@]}"') == 1
    rest = text.replace(job.group(0), "")
    assert not re.search(r'qwen3-trn" (train|reproduce)\b', rest)


def test_the_local_checkpoint_costs_no_more_than_when_setup_was_timed():
    """Making the local "published" checkpoint is most of the main job's CPU time (40
    steps of 2 x 256 tokens; docs/install.md has the timings). A bigger recipe must be
    timed again from empty caches before it lands."""
    from qwen3_trn_helpers.runs.weights import RECIPE

    tokens = RECIPE["steps"] * RECIPE["local_batch_size"] * RECIPE["seq_len"]
    assert tokens <= 40 * 2 * 256, "time setup again (docs/install.md) before growing it"
