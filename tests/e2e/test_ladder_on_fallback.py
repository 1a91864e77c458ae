"""The whole smoke ladder (``qwen3-trn smoke --no-full-size``, as scripts/setup.sh climbs
it on trn2) against the TorchNeuron test double with its CPU fallback: tensors on
``neuron`` compute, several ranks go through the double's ``neuron`` process group, and
every rung runs as far as our code goes (issue 45, item 3: the rehearsal's ladder).

What it proves: the ladder's own code (how each rung is started, its environment on a
Neuron machine, its checks, the compile rung's two runs and its NEFF count, the 2-rank
rungs) works against the contracts the double encodes. Not that trn2 works.

Where each rung stands on the double:

- ``environment`` fails, naming the real torch-neuronx, neuronx-cc and NKI packages the
  double is not (so a pass there could never come from the double);
- ``registration``: torch sees ``neuron``, 64 logical cores, the process group and
  torchtitan say neuron;
- ``collectives``: 2 ranks, all_reduce and an FSDP2 step on ``neuron:0`` and ``neuron:1``;
- ``nki_moe_kernel`` fails: no NKI kernel runs on the double (nki-library is not
  installed), which it names;
- ``spmd_backends``: one step at TP 2 with each of torchtitan's SPMD backends: passes
  where our trn2 default (``full_dtensor``) works, and names those that do;
- ``compile``: one compiled step of the tiny model on ``neuron``, twice with one NEFF
  cache: the double's ``neuron`` backend writes a NEFF per graph, so the second run must
  find them all (a cache hit); SimpleFSDP through graph_trainer's ``jit`` mode;
- ``tiny_native_2ranks`` and ``tiny_transformers_v5_2ranks``: 3 steps on 2 ranks, with
  every record's memory above 0 (the double's allocator counts each index's bytes).

Every operator runs through the fallback's Python: slow on 2 cores (the compile rung's
first step took 1,053 s at load 22 on the issue-29 double), hence the ladder's own
timeouts.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from fake_torch_neuronx.install import install

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.long, pytest.mark.slow]


@pytest.fixture(scope="module")
def ladder(tmp_path_factory) -> tuple[dict[str, dict], dict, Path, str]:
    """One climb of the whole ladder on the computing double, shared."""
    tmp_path = tmp_path_factory.mktemp("ladder-fallback")
    env = {**install(tmp_path / "double", record=tmp_path / "seen"),
           "FAKE_TORCH_NEURONX_CPU_FALLBACK": "1", "HF_HUB_OFFLINE": "1"}  # fmt: skip
    for var in ("QWEN3_TRN_NEURON_CORES", "NEURON_RT_VISIBLE_CORES"):
        env.pop(var, None)
    out = tmp_path / "smoke"
    proc = subprocess.run(
        [sys.executable, "-m", "qwen3_trn_helpers", "smoke", "--no-full-size", "--out", str(out)],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=7200,
    )  # fmt: skip
    print(proc.stdout)  # the rehearsal's ladder, rung by rung (pytest -s shows it)
    smoke_json = out / "smoke.json"
    assert smoke_json.exists(), proc.stdout + proc.stderr
    climbed = json.loads(smoke_json.read_text())
    return {r["name"]: r for r in climbed["rungs"]}, climbed, tmp_path, proc.stdout


def test_the_ladder_climbs_every_rung_it_can_on_the_double(ladder):
    rungs, _, _, said = ladder
    passed = ("registration", "collectives", "spmd_backends", "compile",
              "tiny_native_2ranks", "tiny_transformers_v5_2ranks")  # fmt: skip
    for name in passed:
        assert rungs[name]["status"] == "pass", (name, rungs[name], said)
    assert rungs["registration"]["reason"].startswith("64 neuron devices"), rungs
    assert "2 ranks on neuron (neuron)" in rungs["collectives"]["reason"], rungs
    assert "our default 'full_dtensor' works" in rungs["spmd_backends"]["reason"], rungs
    for name in ("tiny_native_2ranks", "tiny_transformers_v5_2ranks"):
        assert rungs[name]["reason"].startswith("3 steps"), rungs[name]


def test_compile_rung_compiles_a_step_on_neuron_then_hits_the_neff_cache(ladder):
    """The compiled step ran on ``neuron`` tensors through the double's ``neuron``
    backend (NEFFs written), and the second run compiled nothing new."""
    rungs, _, tmp_path, _ = ladder
    assert "cache hit: no new NEFF" in rungs["compile"]["reason"], rungs["compile"]
    compiled = [json.loads(p.read_text()) for p in (tmp_path / "seen").glob("dynamo-*.json")]
    assert compiled and all(c["refused"] == 0 for c in compiled), compiled
    assert sum(c["graphs"] for c in compiled) > 0, compiled


def test_what_the_double_cannot_stand_in_for_is_named(ladder):
    """The double is no Neuron install and runs no NKI kernel: those rungs fail naming
    what is missing (never a pass that could only come from the double)."""
    rungs, climbed, _, _ = ladder
    environment = rungs["environment"]
    assert environment["status"] == "fail", environment
    for package in ("torch-neuronx", "neuronx-cc", "nki"):
        assert package in environment["reason"], environment
    kernel = rungs["nki_moe_kernel"]
    assert kernel["status"] == "fail" and "NKI MoE kernels cannot load" in kernel["reason"], kernel
    said = {c["choice"]: c["outcome"] for c in climbed["trn2_choices"]}
    assert said["compiled SimpleFSDP through graph_trainer's jit mode"] == "ran", said
    assert said["nkilib's experimental MoE backward (blockwise_mm_bwd)"] == "failed", said
