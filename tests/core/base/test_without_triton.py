"""Training where triton cannot be imported (macOS, Windows): qwen3_trn_helpers/without_triton.py.

The children set ``sys.modules["triton"] = None`` before anything imports, which makes
``import triton`` fail and ``find_spec("triton")`` answer None, as on a Mac.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from qwen3_trn_helpers import without_triton

NO_TRITON = 'import sys; sys.modules["triton"] = None\n'


def child(code: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", NO_TRITON + code], capture_output=True, text=True, timeout=timeout
    )


def test_stand_in_exposes_exactly_what_torchtitan_imports_from_its_kernels():
    """The names api.py takes from kernels.py; a torchtitan that changes them fails here."""
    import torchtitan

    api = Path(torchtitan.__file__).parent / "distributed/minimal_async_ep/api.py"
    imported = {
        alias.name
        for node in ast.walk(ast.parse(api.read_text()))
        if isinstance(node, ast.ImportFrom) and node.module == without_triton.KERNELS_MODULE
        for alias in node.names
    }
    assert imported == set(without_triton.KERNEL_NAMES)
    module = without_triton.stand_in_module()
    assert {n for n in vars(module) if n.endswith("_kernel")} == imported


def test_a_stand_in_kernel_refuses_to_run():
    kernel = getattr(without_triton.stand_in_module(), without_triton.KERNEL_NAMES[0])
    with pytest.raises(without_triton.TritonUnavailable, match="triton is not installed"):
        kernel()


def test_hook_serves_nothing_where_triton_is_installed():
    """Here triton exists: the real kernels module is imported, not the stand-in."""
    assert without_triton.triton_importable()
    assert without_triton.StandInFinder().find_spec(without_triton.KERNELS_MODULE) is None
    import torchtitan.models.qwen3  # noqa: F401

    assert not without_triton.stood_in()
    assert without_triton.triton_summary() == without_triton.triton_version()


#: notebook 02's entry-point cell as a Mac user types it without the hook
ENTRY_ARGS = ["--module", "qwen3_trn_helpers", "--config", "qwen3_trn_tiny_native", "--help"]
AS_TYPED = "runpy.run_module('torchtitan.train', run_name='__main__', alter_sys=True)"


def test_upstream_still_imports_triton_unconditionally():
    """Fails once torchtitan imports without triton: then without_triton.py can go.
    (The child is notebook 02's entry-point cell without the hook: it stops there.)"""
    proc = child(f"import runpy; sys.argv = ['x', *{ENTRY_ARGS!r}]\n" + AS_TYPED)
    assert proc.returncode != 0
    assert "ModuleNotFoundError: import of triton halted" in proc.stderr, proc.stderr[-2000:]


def test_pth_written_only_where_triton_is_missing(tmp_path, monkeypatch):
    monkeypatch.setattr(without_triton, "pth_path", lambda: tmp_path / without_triton.PTH_NAME)
    monkeypatch.setattr(without_triton, "triton_importable", lambda: False)
    assert without_triton.write_pth().read_text() == without_triton.PTH_LINE
    monkeypatch.setattr(without_triton, "triton_importable", lambda: True)
    assert without_triton.write_pth() is None
    assert not (tmp_path / without_triton.PTH_NAME).exists()


@pytest.mark.long
@pytest.mark.slow
def test_every_variant_trains_without_triton(tmp_path):
    """One child: torchtitan's own entry point through the .pth setup.sh writes, then
    run() for every variant, 2 steps each; torch keeps hearing that triton is absent."""
    site_dir = tmp_path / "site"
    site_dir.mkdir()
    (site_dir / without_triton.PTH_NAME).write_text(without_triton.PTH_LINE)
    argv = ["torchtitan.train", "--module", "qwen3_trn_helpers", "--config",
            "qwen3_trn_tiny_native", "--training.steps", "2",
            "--dump_folder", str(tmp_path / "titan")]  # fmt: skip
    code = f"""
import site, runpy, importlib.util, json
site.addsitedir({str(site_dir)!r})  # as Python's start-up processes the venv's .pth files
assert "torchtitan" not in sys.modules
sys.argv = {argv!r}
runpy.run_module("torchtitan.train", run_name="__main__")
from qwen3_trn_helpers import run, without_triton
from torch.utils._triton import has_triton_package
from qwen3_trn_helpers.model.variants import VARIANTS
losses = {{}}
for variant in VARIANTS:
    result = run(variant, steps=2, init="random", device="cpu", progress=False,
                 out={str(tmp_path)!r} + "/" + variant)
    losses[variant] = result.losses
print("RESULT", json.dumps(dict(losses=losses, stood_in=without_triton.stood_in(),
      spec=importlib.util.find_spec("triton") is None, torch_triton=has_triton_package())))
"""
    started = time.monotonic()
    proc = child(code)
    elapsed = time.monotonic() - started
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT "))
    result = json.loads(line.removeprefix("RESULT "))
    assert result["stood_in"] and result["spec"] and not result["torch_triton"]
    from qwen3_trn_helpers.model.variants import VARIANTS

    assert set(result["losses"]) == set(VARIANTS)
    for losses in result["losses"].values():
        assert len(losses) == 2 and all(11 < x < 13 for x in losses)
    titan = (tmp_path / "titan" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(x)["step"] for x in titan] == [1, 2]
    print(f"no-triton child: {elapsed:.0f} s")


def test_doctor_and_preflight_say_what_an_absent_triton_means(monkeypatch, capsys):
    """What a Mac user reads in `qwen3-trn doctor` and notebook 00."""
    from qwen3_trn_helpers import cli, cpu_peak
    from qwen3_trn_helpers.lessons import preflight

    monkeypatch.setattr(without_triton, "triton_importable", lambda: False)
    monkeypatch.setattr(cpu_peak, "cpu_matmul_peak", lambda: 1e11)
    assert cli.main(["doctor"]) == 0
    out = capsys.readouterr().out
    (row,) = [ln for ln in out.splitlines() if ln.split()[:2] == ["triton", "absent:"]]
    assert "fine for this course" in row
    assert "torchtitan's own entry point (python -m torchtitan.train) needs" in out
    (check,) = [c for c in preflight.check_environment(build_assets=False) if c.name == "triton"]
    assert check.ok and check.detail.startswith("absent") and not check.required


def test_preflight_names_a_missing_entry_point_hook(monkeypatch, tmp_path):
    """Notebook 00 on a Mac set up by hand: the hook `python -m torchtitan.train` needs."""
    from qwen3_trn_helpers.lessons import preflight

    monkeypatch.setattr(without_triton, "triton_importable", lambda: False)
    monkeypatch.setattr(without_triton, "pth_path", lambda: tmp_path / without_triton.PTH_NAME)
    (check,) = [
        c for c in preflight.check_environment(build_assets=False)
        if c.name == "torchtitan entry point"
    ]  # fmt: skip
    assert not check.ok and not check.required and "write_pth()" in check.fix
    (tmp_path / without_triton.PTH_NAME).write_text(without_triton.PTH_LINE)
    (check,) = [
        c for c in preflight.check_environment(build_assets=False)
        if c.name == "torchtitan entry point"
    ]  # fmt: skip
    assert check.ok and "hook in place" in check.detail


@pytest.mark.slow
def test_entry_point_cell_runs_without_triton_or_hook(monkeypatch, tmp_path):
    """Notebook 02's entry-point cell on a Mac without the start-up hook: the argv the
    cell uses parses and answers --help through torchtitan's own main(). (The plain
    `-m torchtitan.train` stops at `import triton`: the test above.)"""
    monkeypatch.setattr(without_triton, "triton_importable", lambda: False)
    monkeypatch.setattr(without_triton, "pth_path", lambda: tmp_path / "absent.pth")
    argv = without_triton.entry_point_argv(ENTRY_ARGS)
    assert argv[0] == "-c"  # no hook here: the hook's line runs first
    fixed = child(f"sys.argv = ['-c', *{ENTRY_ARGS!r}]\n" + argv[1])
    assert fixed.returncode == 0, fixed.stderr[-2000:]
    assert "--training.steps" in fixed.stdout


def test_torchs_triton_warning_is_filtered_where_it_is_noise():
    """torch's flop counter warns at import when triton is missing (a CUDA build of
    torch); with our package imported first, the line is gone."""
    probe = "import torch.utils.flop_counter\n"
    plain = child(probe, timeout=300)
    if "triton not found" not in plain.stderr:
        pytest.skip("this torch build does not warn (its torch.version has no cuda/hip/xpu)")
    ours = child("import qwen3_trn_helpers\n" + probe, timeout=300)
    assert ours.returncode == 0 and "triton not found" not in ours.stderr, ours.stderr
