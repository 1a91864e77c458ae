"""The trn2 walkthrough rehearsed on the torch-neuronx test double, as a trn2 user runs it
(issue 45, item 3; the ``long`` step): several ranks on ``neuron`` tensors through the
double's ``neuron`` process group, with its CPU fallback computing.

- ``qwen3-trn train --device neuron --nproc 2``, plain and in a class's share: N11 (every
  rank but the first divided by torch-neuronx's ``total_memory`` of 0) and N10 (a share's
  ranks were put on ``neuron:0``, which torch-neuronx refuses after init) each failed
  here before their fix;
- ``qwen3-trn reproduce`` at 2 ranks;
- a notebook kernel started by ``.venv/bin/jupyter lab`` from a shell whose PATH lacks
  the venv (N12: torch-neuronx runs neuronx-cc through PATH, setup links it into
  ``.venv/bin`` only): its 2-rank run compiles, and its device report says where
  neuronx-cc is;
- notebooks 00-05 under nbval in a kernel whose torch sees the double, at the tiny
  preset by ``QWEN3_TRN_TRN2_RANKS=2`` (lessons/reproduction.py);
- the smoke ladder: tests/e2e/test_ladder_on_fallback.py.

It proves that our trn2 code paths run end to end against torch-neuronx's documented and
source-read contracts; not that trn2 works (docs: the test double's section).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fake_torch_neuronx.install import install, write_compiler

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.long, pytest.mark.slow]


@pytest.fixture(scope="module")
def double(tmp_path_factory) -> tuple[dict[str, str], Path]:
    """The double with its CPU fallback, recording into ``seen``: the environment a
    trn2 user's shell has (neuron-ls and neuronx-cc on PATH), offline."""
    root = tmp_path_factory.mktemp("double")
    env = install(root, record=root / "seen")
    env.update(
        FAKE_TORCH_NEURONX_CPU_FALLBACK="1",
        HF_HUB_OFFLINE="1",
        OMP_NUM_THREADS="1",
        TORCH_NEURONX_NEFF_CACHE_DIR=str(root / "neff"),
    )
    for var in ("QWEN3_TRN_NEURON_CORES", "NEURON_RT_VISIBLE_CORES"):
        env.pop(var, None)
    return env, root / "seen"


def _run(args: list[str], env: dict[str, str], timeout: float = 1500):
    return subprocess.run(
        args, env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )  # fmt: skip


def _records(seen: Path, pattern: str) -> dict[str, dict]:
    return {p.name: json.loads(p.read_text()) for p in seen.glob(pattern)}


def _train(env, out: Path, *extra: str) -> subprocess.CompletedProcess:
    return _run(
        [sys.executable, "-m", "qwen3_trn_helpers", "train", "--device", "neuron",
         "--nproc", "2", "--preset", "tiny", "--steps", "2", "--out", str(out),
         "--no-progress", *extra],
        env,
    )  # fmt: skip


def test_two_ranks_train_on_neuron_through_the_neuron_backend(double, tmp_path):
    """N11: before, every rank but the first stopped at step 1 with "ZeroDivisionError:
    division by zero" (torchtitan's memory percentage over torch-neuronx's capacity of
    0 for neuron:1). Now both ranks train; FSDP2's collectives ran on `neuron` tensors
    through the `neuron` process group on each rank."""
    env, seen = double
    shutil.rmtree(seen, ignore_errors=True)
    seen.mkdir()
    proc = _train(env, tmp_path / "run")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    records = [json.loads(ln) for ln in (tmp_path / "run" / "metrics.jsonl").open()]
    assert [r["step"] for r in records] == [1, 2]
    assert all(r["memory_gib"] > 0 and "memory_note" not in r for r in records), records
    ranks = {r["rank"]: r for r in _records(seen, "rank*.json").values()}
    assert {k: v["visible_cores"] for k, v in ranks.items()} == {0: "0", 1: "1"}
    ran = _records(seen, "collectives_rank*.json")
    for rank in ("0", "1"):  # FSDP2's all-gathers and reduce-scatters, on every rank
        assert {"all_gather_single", "reduce_scatter_single"} <= set(
            ran[f"collectives_rank{rank}.json"]
        ), ran
    assert (
        "aten::_fused_adamw_"
        in _records(seen, "fallback_rank1.json")["fallback_rank1.json"]["caught"]
    )  # rank 1's optimizer step ran on neuron:1


def test_two_ranks_in_a_class_share_train_each_on_its_own_core(double, tmp_path):
    """N10: with QWEN3_TRN_NEURON_CORES=8-15 each rank saw one core before torch loaded,
    torchtitan put both on neuron:0, and rank 1 failed with "Attempted to access device
    that doesn't attach to this process, received 0 expected to be equal or greater than
    1". Now each rank claims its core (8, 9) as its process group starts."""
    env, seen = double
    shutil.rmtree(seen, ignore_errors=True)
    seen.mkdir()
    proc = _train({**env, "QWEN3_TRN_NEURON_CORES": "8-15"}, tmp_path / "share")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "Attempted to access device" not in proc.stderr
    ranks = {r["rank"]: r for r in _records(seen, "rank*.json").values()}
    assert {k: v["visible_cores"] for k, v in ranks.items()} == {0: "8", 1: "9"}
    run = json.loads((tmp_path / "share" / "run.json").read_text())
    assert run["spec"]["neuron_cores"] == "8-9", run["spec"]


def test_reproduce_at_two_ranks(double, tmp_path):
    """`qwen3-trn reproduce --nproc 2` on trn2: the tiny preset on 2 ranks, the local
    published weights and random init; the published start is the lower loss."""
    env, _ = double
    out = tmp_path / "rep"
    proc = _run(
        [sys.executable, "-m", "qwen3_trn_helpers", "reproduce", "--variant", "native",
         "--nproc", "2", "--steps", "2", "--out", str(out), "--no-progress"],
        env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    losses = {}
    for init in ("pretrained", "random"):
        run = json.loads((out / init / "run.json").read_text())
        assert (run["resolved"]["device"], run["resolved"]["ranks"]) == ("neuron", 2), run
        assert run["resolved"]["preset"] == "tiny", run
        losses[init] = [json.loads(ln)["loss"] for ln in (out / init / "metrics.jsonl").open()]
    assert losses["pretrained"][0] < losses["random"][0] - 2, losses


# --- Jupyter from a shell without the venv on PATH (N12) ----------------------------------


def _venv_without_path(tmp_path: Path) -> Path:
    """A venv as setup leaves it on trn2, for this test's interpreter: its bin holds
    python (this venv's, through pyvenv.cfg and its lib), jupyter, and neuronx-cc (setup
    links the Neuron compiler there); nothing of it is on PATH."""
    real = Path(sys.prefix)
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text((real / "pyvenv.cfg").read_text())
    (venv / "lib").symlink_to(real / "lib")
    (venv / "share").symlink_to(real / "share")  # JupyterLab's assets
    (venv / "bin" / "python").symlink_to(Path(sys.executable))
    for script in ("jupyter", "jupyter-lab", "jupyter-server"):
        text = (real / "bin" / script).read_text().splitlines()
        text[0] = f"#!{venv / 'bin' / 'python'}"
        (venv / "bin" / script).write_text("\n".join(text) + "\n")
        (venv / "bin" / script).chmod(0o755)
    write_compiler(venv / "bin")
    return venv


CELL = """
from qwen3_trn_helpers import device_report, run
report = device_report()
print("NEURONX_CC", report.neuronx_cc)
result = run("native", nproc=2, steps=1, out={out!r}, progress=False)
print("STEPS", len(result.metrics))
"""


def test_jupyter_lab_started_without_the_venv_on_path_trains(double, tmp_path):
    """`.venv/bin/jupyter lab` from a shell whose PATH has neither the venv nor
    neuronx-cc: a kernel it starts reports where neuronx-cc is, and a 2-rank run from
    the kernel compiles (before N12's fix the ranks failed "Command failed (neuronx-cc
    compilation) with exit code 127": the double compiles each operator's first run
    through PATH, as torch-neuronx does)."""
    from jupyter_client import BlockingKernelClient

    env, _ = double
    venv = _venv_without_path(tmp_path)
    bare = install(tmp_path / "double", compiler_on_path=False)  # neuron-ls, no compiler
    path = os.pathsep.join([str(tmp_path / "double" / "bin"), "/usr/local/bin", "/usr/bin", "/bin"])
    lab_env = {**env, "PATH": path, "PYTHONPATH": bare["PYTHONPATH"],
               "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"), "HOME": str(tmp_path)}  # fmt: skip
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    lab = subprocess.Popen(
        [str(venv / "bin" / "jupyter"), "lab", "--no-browser", f"--port={port}",
         "--ServerApp.ip=127.0.0.1", "--IdentityProvider.token=rehearsal", "--allow-root",
         f"--ServerApp.root_dir={tmp_path}"],
        env=lab_env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, start_new_session=True,
    )  # fmt: skip
    try:
        import urllib.request

        base = f"http://127.0.0.1:{port}/api"
        headers = {"Authorization": "token rehearsal"}
        deadline = time.monotonic() + 180
        while True:  # the server answers
            try:
                urllib.request.urlopen(urllib.request.Request(f"{base}/status", headers=headers))
                break
            except OSError:
                assert lab.poll() is None and time.monotonic() < deadline, lab.stdout.read()
                time.sleep(1)
        start = urllib.request.Request(f"{base}/kernels", data=b"{}", headers=headers)
        kernel = json.loads(urllib.request.urlopen(start).read())
        client = BlockingKernelClient(
            connection_file=str(tmp_path / "runtime" / f"kernel-{kernel['id']}.json")
        )
        client.load_connection_file()
        client.start_channels()
        client.wait_for_ready(timeout=180)
        said: list[str] = []
        reply = client.execute_interactive(
            CELL.format(out=str(tmp_path / "run")), timeout=1500,
            output_hook=lambda m: said.append(m["content"].get("text", "")
                                              or str(m["content"].get("evalue", ""))),
        )  # fmt: skip
        text = "".join(said)
        assert reply["content"]["status"] == "ok", text[-3000:]
        compiler_line = re.search(r"NEURONX_CC (.*)", text).group(1)
        assert "not on this process's PATH" in compiler_line, compiler_line
        assert str(venv / "bin" / "neuronx-cc") in compiler_line, compiler_line
        assert "STEPS 1" in text, text[-3000:]
        client.stop_channels()
    finally:
        _stop(lab)


def _stop(process: subprocess.Popen) -> None:
    """End the server and everything it started (its kernels), by its process group."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=30)
            return
        except subprocess.TimeoutExpired:
            continue


# --- notebooks 00-05 on the double ----------------------------------------------------------

NOTEBOOKS = [f"notebooks/{n}" for n in (
    "00_preflight.ipynb", "01_device_registration.ipynb", "02_three_variants.ipynb",
    "03_ten_step_run.ipynb", "04_scaling_to_trn2.ipynb", "05_several_nodes.ipynb",
)]  # fmt: skip


def test_notebooks_00_to_05_run_in_a_kernel_that_sees_neuron(double, tmp_path):
    """nbval over notebooks 00-05 in a kernel whose torch sees the double (the kernel
    inherits this environment); the trn2 reproduction at the tiny preset on 2 ranks
    (QWEN3_TRN_TRN2_RANKS=2). Every assert the notebooks make about trn2 runs."""
    env, _ = double
    env = {**env, "QWEN3_TRN_TRN2_RANKS": "2", "TMPDIR": str(tmp_path)}
    proc = _run(
        [sys.executable, "-m", "pytest", "--nbval-lax", "--nbval-current-env",
         "-p", "no:xdist", "-p", "no:cacheprovider", "-q", *NOTEBOOKS],
        env, timeout=5400,
    )  # fmt: skip
    summary = proc.stdout[-6000:]
    print(summary)
    assert proc.returncode == 0, summary + proc.stderr[-2000:]
    # the kernel's torch saw the double: notebook 00's device report, executed again
    executed = tmp_path / "00.ipynb"
    proc = _run(
        [sys.executable, "-m", "jupyter", "nbconvert", "--to", "notebook", "--execute",
         NOTEBOOKS[0], "--output", str(executed)],
        env, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    printed = "".join(
        "".join(out.get("text", ""))
        for cell in json.loads(executed.read_text())["cells"]
        for out in cell.get("outputs", [])
    )
    assert "Trainium: 64 logical NeuronCores on 16 chips" in printed, printed[-2000:]
