"""The smoke ladder's single-process rungs against the TorchNeuron test double with its
opt-in CPU fallback (``FAKE_TORCH_NEURONX_CPU_FALLBACK=1``): tensors on ``neuron``
compute, so the rungs that make them run as far as our code goes.

What it proves: the ladder's own code (how a rung is started, its environment on a
Neuron machine, the registration checks, the compile rung's two runs and its NEFF
count) works against the documented contracts the double encodes. Not that trn2 works.

The single-process rungs and where each stands on the double:

- ``registration``: passes (torch sees ``neuron``, 64 logical cores, the process group
  and torchtitan say neuron);
- ``compile``: one compiled step of the tiny native model on ``neuron``, twice with one
  NEFF cache: the double's ``neuron`` backend writes a NEFF per graph, so the second run
  must find them all (a cache hit). Compiled on neuron, the step trains with SimpleFSDP
  (training/simple_fsdp.py), the whole model one graph for the ``neuron`` backend. Every
  operator runs through the fallback's Python: on a 2-core machine at load 22 the first
  step took 1,053 s wall, hence the hour's timeout (the rung's own);
- ``environment`` and ``nki_moe_kernel`` cannot pass on a double: they check the real
  torch-neuronx, neuronx-cc and NKI packages and run NKI kernels, which the double does
  not pretend to be (the environment rung's failure is asserted to name them).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from fake_torch_neuronx.install import install

ROOT = Path(__file__).resolve().parents[2]
FALLBACK = {"FAKE_TORCH_NEURONX_CPU_FALLBACK": "1"}


def _ladder(tmp_path: Path, env: dict[str, str], rungs: list[str]) -> dict[str, dict]:
    """The ladder's public ``run_ladder`` in a process that has the double (as a user's
    would have torch-neuronx), its rungs by name from smoke.json."""
    out = tmp_path / "smoke"
    code = (
        "import sys; from qwen3_trn_helpers.ops.smoke import run_ladder; "
        "run_ladder(sys.argv[1], full=False, only=sys.argv[2:])"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(out), *rungs],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=3600,
    )  # fmt: skip
    smoke_json = out / "smoke.json"
    assert smoke_json.exists(), proc.stdout + proc.stderr
    return {r["name"]: r for r in json.loads(smoke_json.read_text())["rungs"]}


@pytest.fixture(scope="module")
def single_process_rungs(tmp_path_factory) -> tuple[dict[str, dict], Path]:
    """One climb of the single-process rungs on the computing double, shared."""
    tmp_path = tmp_path_factory.mktemp("ladder-fallback")
    env = {**install(tmp_path / "double", record=tmp_path / "seen"), **FALLBACK}
    env.pop("QWEN3_TRN_NEURON_CORES", None)
    rungs = _ladder(tmp_path, env, ["environment", "registration", "compile"])
    return rungs, tmp_path


@pytest.mark.long
@pytest.mark.slow
def test_registration_rung_passes_on_the_computing_double(single_process_rungs):
    rungs, _ = single_process_rungs
    assert rungs["registration"]["status"] == "pass", rungs
    assert rungs["registration"]["reason"].startswith("64 neuron devices"), rungs


@pytest.mark.long
@pytest.mark.slow
def test_compile_rung_compiles_a_step_on_neuron_then_hits_the_neff_cache(single_process_rungs):
    """The compiled step ran on ``neuron`` tensors through the double's ``neuron``
    backend (NEFFs written), and the second run compiled nothing new."""
    rungs, tmp_path = single_process_rungs
    compile_ = rungs["compile"]
    assert compile_["status"] == "pass", compile_
    assert "cache hit: no new NEFF" in compile_["reason"], compile_
    compiled = [json.loads(p.read_text()) for p in (tmp_path / "seen").glob("dynamo-*.json")]
    assert compiled and all(c["refused"] == 0 for c in compiled), compiled
    assert sum(c["graphs"] for c in compiled) > 0, compiled
    caught = json.loads((tmp_path / "seen" / "fallback_rank0.json").read_text())["caught"]
    assert "aten::_fused_adamw_" in caught, caught  # the optimizer step ran on `neuron`


@pytest.mark.long
@pytest.mark.slow
def test_environment_rung_names_what_the_double_is_not(single_process_rungs):
    """The double is no Neuron install: the environment rung fails naming the real
    packages it checks (so a pass there could never come from the double)."""
    rungs, _ = single_process_rungs
    environment = rungs["environment"]
    assert environment["status"] == "fail", environment
    for package in ("torch-neuronx", "neuronx-cc", "nki"):
        assert package in environment["reason"], environment
