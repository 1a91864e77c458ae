"""The smoke ladder's decisions, on a CPU: what a training rung must show to pass, what
the full-size rung asks for, neuron-ls in both JSON formats, the torchtitan stack.

Nothing here trains or starts a device: metrics are recorded lines, neuron-ls is a
stand-in script that prints recorded JSON, AWS's fork is a folder on a path.
"""

from __future__ import annotations

import json
import os
import typing
from pathlib import Path

import pytest

from qwen3_trn_helpers import device
from qwen3_trn_helpers import stack as torchtitan_stacks
from qwen3_trn_helpers.ops import smoke
from qwen3_trn_helpers.ops.smoke import TrainingCheck, check_training_run

# recorded: a CPU run's first metrics line (qwen3-trn train, tiny native, 2026-11-30)
CPU_STEP = {"step": 1, "loss": 12.644, "grad_norm": 2.11, "tokens_per_s": 100.1,
            "step_time_s": 2.56, "tflops": 0.00055, "memory_gib": 2.09, "tokens_seen": 256,
            "lr": 0.0008}  # fmt: skip


def _run_folder(tmp_path: Path, records: list[dict], corpus="embedded", init="random") -> Path:
    """A run folder as `qwen3-trn train` leaves it. A pretrained run's spec has the
    weights folder as its init (resolved before training) and run.json names it twice."""
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    folder = (
        "/hub/models--Qwen--Qwen3-4B-Instruct-2507/snapshots/abc" if init == "pretrained" else None
    )
    (tmp_path / "run.json").write_text(json.dumps({
        "status": "completed",
        "resolved": {"corpus": corpus, "init": folder or init},
        "init_dir": folder,
    }))  # fmt: skip
    return tmp_path


def _steps(n: int, **extra) -> list[dict]:
    return [{**CPU_STEP, "step": i + 1, "loss": 12.0 - i, **extra} for i in range(n)]


def test_a_cpu_training_rung_passes_on_memory_without_mfu(tmp_path):
    ok, line = check_training_run(_run_folder(tmp_path, _steps(3)), TrainingCheck(3, mfu=False))
    assert ok, line
    assert line.startswith("3 steps, loss 12.000 -> 10.000, memory 2.09 GiB")


@pytest.mark.parametrize(
    "records, expect, says",
    [
        (_steps(2), TrainingCheck(3, mfu=False), "2 of 3 steps recorded"),
        (_steps(3, memory_gib=0.0), TrainingCheck(3, mfu=False), "memory_gib 0.0"),
        (_steps(3, loss=None), TrainingCheck(3, mfu=False), "loss None is not a finite"),
        # trn2: a record without MFU, or MFU 0 (peak FLOPs unknown), fails the rung
        (_steps(2), TrainingCheck(2, mfu=True), "mfu_pct None"),
        (_steps(2, mfu_pct=0.0), TrainingCheck(2, mfu=True), "mfu_pct 0.0"),
        # the full-size rung asked for C4 and the checkpoint: run.json must say so
        (_steps(2, mfu_pct=31.0), TrainingCheck(2, mfu=True, corpus="c4"), "corpus 'embedded'"),
        (_steps(2, mfu_pct=31.0), TrainingCheck(2, True, init="pretrained"), "no checkpoint"),
        (_steps(2, mfu_pct=31.0), TrainingCheck(2, True, init="random"), None),
    ],
)
def test_a_training_rung_fails_on_what_it_claims_to_check(tmp_path, records, expect, says):
    ok, line = check_training_run(_run_folder(tmp_path, records), expect)
    if says is None:  # the control: the same records pass when the claim holds
        assert ok, line
    else:
        assert not ok and says in line, line


def test_memory_zero_on_one_step_of_a_trn2_run_fails(tmp_path):
    records = _steps(2, mfu_pct=28.5)
    records[1]["memory_gib"] = 0  # the rank read another device's statistics
    ok, line = check_training_run(_run_folder(tmp_path, records), TrainingCheck(2, mfu=True))
    assert not ok and line.startswith("step 2: memory_gib 0")


def test_full_size_trn2_run_with_c4_and_checkpoint_passes(tmp_path):
    folder = _run_folder(tmp_path, _steps(2, mfu_pct=28.5), corpus="c4", init="pretrained")
    ok, line = check_training_run(folder, TrainingCheck(2, True, "c4", "pretrained"))
    assert ok and line.endswith("MFU 28.5%"), line


def test_no_metrics_file_fails(tmp_path):
    ok, line = check_training_run(tmp_path, TrainingCheck(1, mfu=False))
    assert not ok and "metrics.jsonl" in line


def test_full_size_rung_asks_for_c4_and_the_checkpoint_when_it_can():
    assert smoke.full_size_flags(online=True, checkpoint_cached=False) == (
        ("--init", "pretrained"),
        (),
    )
    flags, notes = smoke.full_size_flags(online=False, checkpoint_cached=True)
    assert flags == ("--corpus", "embedded", "--init", "pretrained")
    assert notes == ("C4 not checked (no network: HF_HUB_OFFLINE or the hub unreachable)",)
    flags, notes = smoke.full_size_flags(online=False, checkpoint_cached=False)
    assert flags == ("--corpus", "embedded", "--init", "random") and len(notes) == 2


def test_full_size_rung_expects_what_its_flags_ask_for():
    rung = next(r for r in smoke.ladder._rungs(full_size=True) if r.name == "4b_native_64ranks")
    assert "--corpus" not in rung.train  # the preset's own corpus: C4
    online = smoke.Rung(**{**rung.__dict__, "train": (*rung.train, "--init", "pretrained")})
    assert smoke.expectation(online, on_neuron=True) == TrainingCheck(2, True, "c4", "pretrained")
    offline = smoke.Rung(**{**rung.__dict__, "train": (*rung.train, "--corpus", "embedded")})
    assert smoke.expectation(offline, on_neuron=True).corpus == "embedded"
    tiny = next(r for r in smoke.ladder._rungs(full_size=False) if r.name == "tiny_native_2ranks")
    assert smoke.expectation(tiny, on_neuron=False) == TrainingCheck(3, False)


def test_offline_means_no_hub_request(monkeypatch):
    import urllib.request

    def no_network(*a, **k):
        raise AssertionError("the ladder asked the hub while HF_HUB_OFFLINE is set")

    monkeypatch.setattr(urllib.request, "urlopen", no_network)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert smoke.checks._hub_online() is False


# --- spmd_backend ---------------------------------------------------------------------


def test_spmd_backends_are_torchtitans():
    from torchtitan.config.configs import ParallelismConfig

    from qwen3_trn_helpers.training.spec import SPMD_BACKENDS, RunSpec

    hints = typing.get_type_hints(ParallelismConfig)
    assert set(typing.get_args(hints["spmd_backend"])) == set(SPMD_BACKENDS)
    # auto: upstream's default off trn2, the DTensor path AWS documents on it
    assert ParallelismConfig().spmd_backend == "spmd_types" and RunSpec().spmd_backend == "auto"
    from qwen3_trn_helpers.training.plan import plan_run

    assert plan_run(RunSpec(), device_type="cpu").spmd_backend == "spmd_types"
    neuron = plan_run(RunSpec(), device_type="neuron")
    assert neuron.spmd_backend == "full_dtensor"
    assert neuron.summary()["spmd backend"] == "full_dtensor"
    assert "spmd backend" not in plan_run(RunSpec(), device_type="cpu").summary()
    # torchtitan's transformers backend takes spmd_types only (its parallelize.py)
    hf = plan_run(RunSpec(variant="transformers_v5"), device_type="neuron")
    assert hf.spmd_backend == "spmd_types"


def test_spmd_backend_reaches_torchtitans_config():
    from qwen3_trn_helpers.training.plan import plan_run
    from qwen3_trn_helpers.training.spec import RunSpec
    from qwen3_trn_helpers.training.trainer import trainer_config

    config = trainer_config(plan_run(RunSpec(spmd_backend="full_dtensor")), "/tmp/unused")
    assert config.parallelism.spmd_backend == "full_dtensor"
    assert RunSpec(spmd_backend="full_dtensor").to_argv() == ["--spmd-backend", "full_dtensor"]


def test_spmd_rung_runs_tp_and_names_what_works(tmp_path):
    cmd = smoke.spmd_backend_command("full_dtensor", tmp_path)
    i = cmd.index("--parallelism.tensor_parallel_degree")
    assert cmd[i + 1] == "2" and "--nproc-per-node=2" in cmd
    assert cmd[cmd.index("--parallelism.spmd_backend") + 1] == "full_dtensor"
    ok, line = smoke.summarize_backends(
        {"spmd_types": (True, ""), "full_dtensor": (True, ""), "partial_dtensor": (False, "E")},
        "spmd_types",
    )
    assert ok and line.startswith("work here: spmd_types, full_dtensor; fail: partial_dtensor")
    ok, line = smoke.summarize_backends(
        {"spmd_types": (False, "RuntimeError: x"), "full_dtensor": (True, "")}, "spmd_types"
    )
    assert not ok and line.endswith("does not: pass --spmd-backend full_dtensor")


# --- neuron-ls, before and after Neuron 2.34 -----------------------------------------

# recorded shape of `neuron-ls --json-output` (Neuron <= 2.33): a list, one object per chip
OLD_JSON = [
    {"neuron_device": i, "bdf": f"{0xCC + i:02x}:00.0", "connected_to": [(i + 1) % 16],
     "nc_count": 8, "logical_neuroncore_config": 2, "memory_size": 103079215104,
     "neuron_processes": []}
    for i in range(16)
]  # fmt: skip
# `neuron-ls --output-format json` (Neuron 2.34): per the end-of-support notice, top-level
# fields for what applies to several devices (instance, UltraServer) around the device
# list. The notice does not give the field names; these are our assumption.
NEW_JSON = {
    "instance_info": {"instance_type": "trn2.48xlarge", "instance_id": "i-0123456789abcdef0"},
    "ultraserver_info": None,
    "logical_neuroncore_config": 2,
    "neuron_devices": [{k: v for k, v in d.items() if k != "logical_neuroncore_config"}
                       for d in OLD_JSON],
}  # fmt: skip


def test_parse_both_neuron_ls_formats():
    old = device.parse_neuron_ls(json.dumps(OLD_JSON))
    new = device.parse_neuron_ls(json.dumps(NEW_JSON))
    assert len(old) == len(new) == 16
    assert {d["logical_neuroncore_config"] for d in new} == {2}
    assert device.parse_neuron_ls("usage: neuron-ls [options]") is None
    assert device.parse_neuron_ls(json.dumps({"instance_info": {}})) is None


def test_neuron_ls_takes_only_a_device_list_and_cross_checks_its_count():
    """A list of processes (objects without a core count) before the devices is not
    taken for them; a top-level device count that disagrees means no list at all."""
    processes = [{"pid": 4242, "command": "python train.py", "neuron_device": 0}]
    first_processes = {"neuron_processes": processes, **NEW_JSON}
    chips = device.parse_neuron_ls(json.dumps(first_processes))
    assert len(chips) == 16 and all("nc_count" in c for c in chips)
    assert device.parse_neuron_ls(json.dumps({"neuron_processes": processes})) is None
    assert device.parse_neuron_ls(json.dumps(processes)) is None
    counted = {**NEW_JSON, "neuron_device_count": 16}
    assert len(device.parse_neuron_ls(json.dumps(counted))) == 16
    assert device.parse_neuron_ls(json.dumps({**counted, "neuron_device_count": 8})) is None


def _tool(folder: Path, script: str) -> None:
    tool = folder / "neuron-ls"
    tool.write_text("#!/bin/sh\n" + script)
    tool.chmod(0o755)


@pytest.mark.parametrize("release", ["2.33", "2.34"])
def test_neuron_ls_query_works_with_either_release(tmp_path, monkeypatch, release):
    (tmp_path / "old.json").write_text(json.dumps(OLD_JSON))
    (tmp_path / "new.json").write_text(json.dumps(NEW_JSON))
    if release == "2.33":  # knows only --json-output
        script = (f'[ "$1" = "--json-output" ] && exec cat {tmp_path}/old.json\n'
                  'echo "error: unrecognized option $1" >&2; exit 2\n')  # fmt: skip
    else:  # --json-output is gone
        script = (f'[ "$1 $2" = "--output-format json" ] && exec cat {tmp_path}/new.json\n'
                  'echo "error: --json-output is no longer supported" >&2; exit 2\n')  # fmt: skip
    _tool(tmp_path, script)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    chips, how = device.neuron_ls_query()
    assert len(chips) == 16
    assert (
        how
        == {"2.33": "neuron-ls --json-output", "2.34": "neuron-ls --output-format json"}[release]
    )


def test_neuron_ls_without_json_is_one_line(tmp_path, monkeypatch):
    _tool(tmp_path, 'echo "neuron-ls: unknown option" >&2; exit 2\n')
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    chips, how = device.neuron_ls_query()
    assert chips is None and "\n" not in how
    assert how.startswith("neuron-ls gave no device list (neuron-ls --output-format json:")
    assert "neuron-ls --json-output: neuron-ls: unknown option" in how


# --- which torchtitan, and AWS's fork -------------------------------------------------


def test_torchtitan_stack_says_where_it_comes_from():
    stack = torchtitan_stacks.torchtitan_stack(paths=[])
    assert stack.version == "0.3.0" and stack.location.endswith("torchtitan")
    assert stack.fork is None and stack.warning is None


@pytest.mark.parametrize("how", ["module", "dist-info"])
def test_the_fork_in_the_neuron_venv_is_reported(tmp_path, how):
    site = tmp_path / "aws_neuronx_venv" / "site-packages"
    site.mkdir(parents=True)
    if how == "module":  # an editable install leaves its source folder on the path
        (site / "torchtitan_neuron").mkdir()
    else:  # the fork's distribution: upstream's name with a +neuron version
        info = site / "torchtitan-0.2.2+neuron.1.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(
            "Metadata-Version: 2.1\nName: torchtitan\nVersion: 0.2.2+neuron.1\n"
        )
    stack = torchtitan_stacks.torchtitan_stack(paths=[str(tmp_path / "nothing"), str(site)])
    assert stack.fork is not None and str(site) in stack.fork
    assert "shadows it" in stack.warning and "torchtitan 0.3.0" in stack.warning


def test_a_training_rung_records_measured_and_estimated_memory(ten_step_random, tmp_path):
    """smoke.json's training rungs (the 64-rank one on trn2): the peak each step measured
    beside the plan's estimate by category; a folder without a run gives None."""
    from qwen3_trn_helpers.ops.smoke import Ladder, Rung, training_memory

    memory = training_memory(ten_step_random.out)
    measured = memory["measured_peak_gib_per_step"]
    assert len(measured) == 10 and all(m > 0 for m in measured)
    assert {"params", "AdamW", "activations", "total GiB"} <= set(memory["estimated_gib"])
    assert training_memory(tmp_path) is None
    rung = Rung("tiny_native_2ranks", "x", 1, "fix", status="pass", memory=memory)
    entry = Ladder([rung, Rung("collectives", "x", 1, "fix")]).to_json()["rungs"]
    assert entry[0]["memory"] == memory and "memory" not in entry[1]


# (device-memory readings from the driver's counters: tests/e2e/test_torch_neuronx_double.py,
# on the test double's sysfs tree)


def test_smoke_json_says_which_trn2_choices_ran():
    """Issue 45, item 5: each never-run choice of the trn2 path, with the rungs that
    exercise it (a skipped rung did not run it)."""
    from qwen3_trn_helpers.ops.smoke import Ladder, Rung

    climbed = [Rung("compile", "", 1, "", status="pass"),
               Rung("nki_moe_kernel", "", 1, "", status="skip")]  # fmt: skip
    choices = {c["choice"]: c for c in Ladder(climbed).to_json()["trn2_choices"]}
    compiled = choices["compiled SimpleFSDP through graph_trainer's jit mode"]
    assert compiled == {"choice": compiled["choice"], "rungs": {"compile": "pass"},
                        "outcome": "ran"}  # fmt: skip
    backward = choices["nkilib's experimental MoE backward (blockwise_mm_bwd)"]
    assert backward["rungs"] == {"nki_moe_kernel": "skip"} and backward["outcome"] == "not run"
    spmd = next(c for name, c in choices.items() if name.startswith("the SPMD backend"))
    assert spmd["rungs"] == {"spmd_backends": "not run", "tiny_native_2ranks": "not run"}
