"""A trn2 shared by a class: each student's ranks confined to a slice of NeuronCores.

Resolved on this CPU for device "neuron": the slice syntax, its checks, the flag, the
command every rank gets, and the core each rank takes (set before torch is imported).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from qwen3_trn_helpers import cli, trn2
from qwen3_trn_helpers.errors import ConfigError
from qwen3_trn_helpers.runs import neuron_cores
from qwen3_trn_helpers.runs import torchrun as launch
from qwen3_trn_helpers.training.plan import plan_run
from qwen3_trn_helpers.training.spec import RunSpec


def test_core_slice_syntax():
    assert trn2.core_slice("8-15") == range(8, 16)
    assert trn2.core_slice(" 3 ") == range(3, 4)
    assert trn2.core_slice("0-63") == range(64)
    bad_slices = [
        ("8..15", "not a core"),
        ("a-b", "not a core"),
        ("-3", "not a core"),
        ("15-8", "backwards"),
        ("60-67", "past core 63"),
        ("64", "past core 63"),
    ]
    for bad, why in bad_slices:
        with pytest.raises(ValueError, match=why):
            trn2.core_slice(bad)


def test_each_rank_takes_the_slice_start_plus_its_local_rank():
    assert [trn2.rank_visible_core("8-15", r) for r in range(8)] == [str(c) for c in range(8, 16)]
    with pytest.raises(ValueError, match="no core"):
        trn2.rank_visible_core("8-15", 8)
    env = {"LOCAL_RANK": "3"}
    assert neuron_cores.confine_rank_to_its_core(RunSpec(neuron_cores="8-15"), env) == "11"
    assert env["NEURON_RT_VISIBLE_CORES"] == "11"


def test_slice_must_hold_one_core_per_rank():
    assert RunSpec(nproc=8, neuron_cores="8-15", out="x").core_slice() == range(8, 16)
    with pytest.raises(ConfigError, match="holds 8 cores but the run starts 4 rank"):
        plan_run(RunSpec(nproc=4, neuron_cores="8-15", out="x"), device_type="neuron")
    with pytest.raises(ConfigError, match="neuron_cores: '60-67' goes past core 63"):
        RunSpec(nproc=8, neuron_cores="60-67", out="x").validate()


def test_cli_flag_comes_from_the_field_and_a_bad_slice_is_one_error_line(capsys):
    with pytest.raises(SystemExit):
        cli.main(["train", "--help"])
    assert "--neuron-cores" in capsys.readouterr().out
    code = cli.main(["train", "--nproc", "8", "--neuron-cores", "8-1", "--out", "x"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code != 0 and len(err) == 1 and err[0].startswith("error: neuron_cores:"), err


def test_every_rank_gets_the_slice_and_no_inherited_cores(monkeypatch, capsys):
    spec = RunSpec(nproc=8, neuron_cores="8-15", out="/tmp/x", device="neuron")
    plan = plan_run(spec, device_type="neuron")
    cmd = launch.torchrun_command(plan)
    assert cmd[cmd.index("--neuron-cores") + 1] == "8-15"
    monkeypatch.setenv("NEURON_RT_VISIBLE_CORES", "0-63")
    env = launch.rank_environment(plan, spec.neuron_cores)
    assert "NEURON_RT_VISIBLE_CORES" not in env  # each rank sets its own
    assert "rank i takes core 8+i of --neuron-cores 8-15" in capsys.readouterr().err


def test_a_slice_runs_the_tiny_presets_not_the_64_rank_ones():
    """What notebooks/README.md tells a class: on 8 cores a run takes the tiny preset,
    the 30B-A3B does not fit, and AWS's 64-rank layouts need the whole machine."""
    plan = plan_run(RunSpec(nproc=8, neuron_cores="8-15", out="x"), device_type="neuron")
    assert plan.preset.name == "tiny" and plan.world_size == 8
    moe = RunSpec(variant="nki_moe", nproc=8, preset="30b-a3b", neuron_cores="8-15", out="x")
    with pytest.raises(ConfigError, match="needs about .* GiB per NeuronCore"):
        plan_run(moe, device_type="neuron")
    with pytest.raises(ConfigError, match="holds 8 cores but the run starts 64"):
        plan_run(RunSpec(nproc=64, neuron_cores="8-15", out="x"), device_type="neuron")
    with pytest.raises(ConfigError, match="this run trains on 'cpu'"):
        plan_run(RunSpec(neuron_cores="8", out="x"), device_type="cpu")


def test_rank_sets_its_core_before_torch_is_imported(tmp_path):
    """A rank as torchrun starts it (LOCAL_RANK 1 of 2): the first import of torch (which
    autoloads torch-neuronx) already sees NEURON_RT_VISIBLE_CORES = 8 + 1. The run then
    stops for want of a Trainium here, which is fine."""
    code = f"""
import os, sys
os.environ.update(RANK="1", LOCAL_RANK="1", WORLD_SIZE="2", LOCAL_WORLD_SIZE="2")
os.environ.pop("NEURON_RT_VISIBLE_CORES", None)
seen = []
class Spy:
    def find_spec(self, name, path=None, target=None):
        if name == "torch" and not seen:
            seen.append(os.environ.get("NEURON_RT_VISIBLE_CORES"))
        return None
sys.meta_path.insert(0, Spy())
from qwen3_trn_helpers.cli import main
main(["train", "--device", "neuron", "--neuron-cores", "8-9", "--out", {str(tmp_path)!r}])
print("SEEN", __import__("json").dumps(seen))
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RANK", "LOCAL_", "WORLD"))}
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env
    )
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("SEEN "))
    assert json.loads(line.removeprefix("SEEN ")) == ["9"], proc.stderr[-2000:]
    assert "no Trainium device is visible" in proc.stderr


def test_a_students_share_gives_every_notebook_run_its_first_cores():
    """QWEN3_TRN_NEURON_CORES=8-15: a one-rank notebook run takes core 8, a two-rank one
    8-9, a 64-rank one is refused naming the share; an explicit slice wins."""
    env = {neuron_cores.CLASS_SLICE_ENV: "8-15"}
    assert neuron_cores.with_class_slice(RunSpec(), env).neuron_cores == "8-8"
    assert neuron_cores.with_class_slice(RunSpec(nproc=2, out="x"), env).neuron_cores == "8-9"
    explicit = RunSpec(nproc=2, neuron_cores="20-21", out="x")
    assert neuron_cores.with_class_slice(explicit, env) is explicit
    assert neuron_cores.with_class_slice(RunSpec(), {}).neuron_cores is None
    with pytest.raises(ConfigError, match=r"starts 64 ranks but your share .*8-15\) holds 8"):
        neuron_cores.with_class_slice(RunSpec(nproc=64, out="x"), env)
    with pytest.raises(ConfigError, match="QWEN3_TRN_NEURON_CORES: '8-99' goes past"):
        neuron_cores.with_class_slice(RunSpec(), {neuron_cores.CLASS_SLICE_ENV: "8-99"})


def test_every_trn2_launch_takes_the_plans_cores(monkeypatch, tmp_path):
    """launch() (every run on trn2, even a notebook's one-rank one) gives its ranks the
    cores the plan took from the share: the plan's word, not a slice made again (a
    share changed after planning does not move the run)."""
    from qwen3_trn_helpers import device as device_mod
    from qwen3_trn_helpers.device import DEVICES

    class Launched(Exception):
        pass

    seen = []

    def run_child(cmd, **kwargs):
        seen.append(cmd)
        raise Launched

    monkeypatch.setattr(launch, "run_child", run_child)
    for device in ("neuron", "cpu"):
        monkeypatch.setattr(device_mod, "resolve", lambda requested="auto": DEVICES[device])
        monkeypatch.setenv(neuron_cores.CLASS_SLICE_ENV, "16-23")
        plan = plan_run(RunSpec(nproc=2, out=str(tmp_path / device)))
        monkeypatch.setenv(neuron_cores.CLASS_SLICE_ENV, "24-31")
        with pytest.raises(Launched):
            launch.run_with_torchrun(plan)
    on_neuron, on_cpu = seen
    assert on_neuron[on_neuron.index("--neuron-cores") + 1] == "16-17"
    assert "--neuron-cores" not in on_cpu


def test_torchtitans_own_entry_point_in_notebook_02_takes_the_shares_first_core(
    monkeypatch, tmp_path
):
    from qwen3_trn_helpers.lessons import torchtitan_view
    from qwen3_trn_helpers.runs import child

    seen = {}

    def fake_run_child(cmd, *, env, log, **kwargs):
        seen.clear()
        seen.update(env)
        (tmp_path / "metrics.jsonl").write_text("")
        return child.ChildResult(list(cmd), 0, 1, 0.1, log, "")

    monkeypatch.setattr(child, "run_child", fake_run_child)
    monkeypatch.setenv(neuron_cores.CLASS_SLICE_ENV, "24-31")
    torchtitan_view.torchtitan_entry_point("qwen3_trn_tiny_native", tmp_path)
    assert seen["NEURON_RT_VISIBLE_CORES"] == "24"
    monkeypatch.delenv(neuron_cores.CLASS_SLICE_ENV)
    monkeypatch.delenv("NEURON_RT_VISIBLE_CORES", raising=False)
    torchtitan_view.torchtitan_entry_point("qwen3_trn_tiny_native", tmp_path)
    assert "NEURON_RT_VISIBLE_CORES" not in seen  # no share: torch-neuronx's own default


def test_the_notebooks_other_children_see_only_the_shares_first_core(monkeypatch):
    """Children a notebook starts on trn2 (its helpers, 01's tensor on a NeuronCore) all
    go through child.call: a real child reads its own environment."""
    from qwen3_trn_helpers.runs import child

    monkeypatch.setenv(neuron_cores.CLASS_SLICE_ENV, "40-47")
    assert child.call(os.getenv, "NEURON_RT_VISIBLE_CORES") == "40"
    monkeypatch.delenv(neuron_cores.CLASS_SLICE_ENV)
    monkeypatch.delenv("NEURON_RT_VISIBLE_CORES", raising=False)
    assert child.call(os.getenv, "NEURON_RT_VISIBLE_CORES") is None


def test_doctor_names_the_share(monkeypatch, capsys):
    from qwen3_trn_helpers import cpu_peak

    monkeypatch.setattr(cpu_peak, "cpu_matmul_peak", lambda: 1e11)
    monkeypatch.setenv(neuron_cores.CLASS_SLICE_ENV, "8-15")
    assert cli.main(["doctor"]) == 0
    assert "your share of this trn2: NeuronCores 8-15" in capsys.readouterr().out
    monkeypatch.setenv(neuron_cores.CLASS_SLICE_ENV, "8-70")
    assert cli.main(["doctor"]) != 0
    assert capsys.readouterr().err.startswith("error: QWEN3_TRN_NEURON_CORES: '8-70' goes past")


@pytest.mark.slow
def test_raw_torchrun_ranks_stay_in_the_share(tmp_path, monkeypatch):
    """The smoke ladder's own torchrun rungs (collectives, spmd_backends): each rank
    starts with the share's first core + LOCAL_RANK, as our training ranks do."""
    import subprocess
    import sys

    from qwen3_trn_helpers.runs.neuron_cores import CLASS_SLICE_ENV, share_torchrun_prefix
    from qwen3_trn_helpers.ops.smoke import _command, _rungs, spmd_backend_command

    monkeypatch.setenv(CLASS_SLICE_ENV, "8-15")
    prefix = share_torchrun_prefix(2)
    report = (  # one write per line: two ranks' prints share a pipe and can interleave
        "import os; os.write(1, ('core %s %s\\n' % (os.environ['LOCAL_RANK'], "
        "os.environ['NEURON_RT_VISIBLE_CORES'])).encode())"
    )
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
         *prefix, "-c", report],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert sorted(ln for ln in proc.stdout.splitlines() if ln.startswith("core")) == [
        "core 0 8", "core 1 9"
    ]  # fmt: skip
    collectives = next(r for r in _rungs(False) if r.name == "collectives")
    assert _command(collectives, tmp_path)[4:10] == ["--nproc-per-node=2", *prefix[:5]]
    assert prefix[:2] == ["--no-python", "bash"] and prefix[-1] == sys.executable
    assert spmd_backend_command("spmd_types", tmp_path)[5:11] == prefix
    monkeypatch.setenv(CLASS_SLICE_ENV, "8-8")  # a one-core share cannot hold 2 ranks
    with pytest.raises(ConfigError, match="holds 1 NeuronCores"):
        share_torchrun_prefix(2)
    monkeypatch.delenv(CLASS_SLICE_ENV)
    assert share_torchrun_prefix(2) == []
