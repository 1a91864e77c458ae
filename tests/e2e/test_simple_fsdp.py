"""SimpleFSDP (torchtitan 0.3.0's graph_trainer, training/simple_fsdp.py): the compiled
path on neuron, as AWS's TorchTitan best practices advise ("With TorchTitan, use
SimpleFSDP for torch.compile work"), once it trains like FSDP2 on a CPU.

The long test holds the comparison: the tiny native Qwen3, compiled (inductor), fp32,
3 steps on 2 ranks, by FSDP2 (each block compiled) and by SimpleFSDP (the whole model
one graph); the same losses and gradient norms.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from qwen3_trn_helpers.errors import ConfigError
from qwen3_trn_helpers.training.plan import plan_run
from qwen3_trn_helpers.training.spec import RunSpec

ROOT = Path(__file__).resolve().parents[2]
RANK_SCRIPT = Path(__file__).resolve().parent / "simple_fsdp_rank.py"


def _plan(device: str, *, compile_: bool = True, variant: str = "native"):
    spec = RunSpec(variant=variant, preset="tiny", steps=1, compile=compile_, device=device)
    return plan_run(spec, device_type=device)


def test_compiled_native_runs_on_neuron_plan_simple_fsdp():
    """Only a compiled native run on neuron, FSDP alone (the layout compared below);
    eager, CPU, tensor parallel and the other variants keep FSDP2 (the MoE variant's
    blockwise experts and the transformers backend's model are not what
    graph_trainer's Qwen3 parallelisation wraps)."""
    assert _plan("neuron").data_parallel == "simple_fsdp"
    at_tp_4 = RunSpec(preset="4b", nproc=64, compile=True, out="x", device="neuron")
    assert plan_run(at_tp_4, device_type="neuron").tp == 4
    assert plan_run(at_tp_4, device_type="neuron").data_parallel == "fsdp2"
    assert _plan("neuron", compile_=False).data_parallel == "fsdp2"
    assert _plan("cpu").data_parallel == "fsdp2"
    assert _plan("neuron", variant="transformers_v5").data_parallel == "fsdp2"


def test_simple_fsdp_config_is_graph_trainers_jit_mode_with_our_model(tmp_path):
    """The config a compiled neuron run builds: torchtitan's GraphTrainer under our
    scope, graph_trainer's Qwen3 parallelisation (SimpleFSDP) around our model's numbers,
    the `neuron` dynamo backend reached through the jit mode (aot_fx_trace uses none)."""
    from torchtitan.experiments.graph_trainer.qwen3.model import GraphTrainerQwen3Model
    from torchtitan.experiments.graph_trainer.qwen3.parallelize import parallelize_qwen3

    from qwen3_trn_helpers.training.trainer import Qwen3TrnGraphTrainer, trainer_config

    plan = _plan("neuron")
    config = trainer_config(plan, tmp_path)
    assert type(config) is Qwen3TrnGraphTrainer.Config
    assert config.compile.mode == "jit" and config.compile.backend == "neuron"
    assert config.model_spec.parallelize_fn is parallelize_qwen3
    model = config.model_spec.model
    assert isinstance(model, GraphTrainerQwen3Model.Config)
    fsdp2 = trainer_config(plan, tmp_path, data_parallel="fsdp2")
    assert model.dim == fsdp2.model_spec.model.dim and model.vocab_size == plan.shape.vocab_size
    assert config.parallelism.spmd_backend == "partial_dtensor"
    assert config.qwen3_trn.device.type == "neuron"


def test_simple_fsdp_without_compile_is_refused_in_one_line(tmp_path):
    from qwen3_trn_helpers.training.trainer import trainer_config

    with pytest.raises(ConfigError, match="SimpleFSDP is the compiled path: pass compile=True"):
        trainer_config(_plan("cpu", compile_=False), tmp_path, data_parallel="simple_fsdp")


def _two_ranks(path: str, out: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAKE_TORCH_NEURONX")}
    env.update(OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           "--nproc-per-node=2", str(RANK_SCRIPT), path, str(out), "--steps", "3"]  # fmt: skip
    proc = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    return json.loads((out / "steps.json").read_text())


@pytest.fixture(scope="module")
def compared(tmp_path_factory) -> dict[str, dict]:
    """Both paths trained once (2 ranks each, compiled, fp32), shared by the tests."""
    tmp = tmp_path_factory.mktemp("simple-fsdp")
    return {path: _two_ranks(path, tmp / path) for path in ("fsdp2", "simple_fsdp")}


@pytest.mark.long
@pytest.mark.slow
def test_simple_fsdp_shards_and_compiles_the_whole_model(compared):
    """Each run trained with what it claims: FSDP2's modules, or SimpleFSDP's
    parametrized ones (and no FSDP2), under our trainers."""
    assert compared["fsdp2"]["trainer"] == "Qwen3TrnTrainer"
    assert compared["fsdp2"]["sharded_by"] == ["FSDP2"]
    assert compared["simple_fsdp"]["trainer"] == "Qwen3TrnGraphTrainer"
    assert compared["simple_fsdp"]["sharded_by"] == ["SimpleFSDP"]
    assert compared["simple_fsdp"]["graphs_compiled"] >= 1


@pytest.mark.long
@pytest.mark.slow
def test_simple_fsdp_trains_like_fsdp2(compared):
    """Same losses and gradient norms, step by step, within 1e-5 (relative).

    Why that tolerance: fp32, the same initial weights (seed 0, each rank's shard of
    the same layout) and the same batches; only the order of floating-point operations
    differs (inductor fuses one whole-model graph instead of one per block; 2 ranks'
    reduce-scatter adds the same two numbers). Measured: losses bitwise equal, gradient
    norms 2e-7 apart (a few fp32 ulps) after 3 AdamW steps. 1e-5 leaves 50x room and is
    far below what a wrong data-parallel path changes: the loss moves by 2e-3 (relative)
    a step, and a gradient summed twice or averaged over the ranks (which AdamW's
    scale-invariance would hide in the loss) doubles or halves the gradient norm.
    """
    fsdp2, simple = compared["fsdp2"], compared["simple_fsdp"]
    assert len(fsdp2["losses"]) == len(simple["losses"]) == 3
    assert simple["losses"] == pytest.approx(fsdp2["losses"], rel=1e-5)
    assert simple["grad_norms"] == pytest.approx(fsdp2["grad_norms"], rel=1e-5)
    assert fsdp2["losses"][2] < fsdp2["losses"][0]  # (it trained)
