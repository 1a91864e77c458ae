"""Our trn2 code paths against a test double of torch-neuronx (tests/fake_torch_neuronx):
the documented contracts, executable on a CPU. The double proves our code honours those
contracts (each with its source in the double), not that trn2 works.

Holds N6-N9 of issue 29: the root communicator is rank 0's (N6), compiled document
attention is refused on neuron before it reaches the backend that would refuse it (N7),
the ladder under a class share (N8), device-memory peaks per logical core, reset (N9).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from fake_torch_neuronx import RULES, sysfs
from fake_torch_neuronx.install import NODE_ADDR_VAR, install

from qwen3_trn_helpers.errors import ConfigError
from qwen3_trn_helpers.ops import smoke
from qwen3_trn_helpers.ops.jobs.kubernetes import trainjob_manifests
from qwen3_trn_helpers.ops.jobs.slurm import slurm_script
from qwen3_trn_helpers.training.spec import RunSpec

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(cmd: list[str], env: dict[str, str], timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout)


# --- N6: the root communicator is rank 0's -----------------------------------------------


def job_environment(kind: str, tmp_path: Path, head_ip: str, port: int) -> dict[str, str]:
    """The variables a trn2 job file gives every node, as each node's shell has them.

    Slurm: the script's ``export``/``unset`` lines run by bash with the head node's
    address and port, starting from a submitting shell that exported its own
    NEURON_RT_ROOT_COMM_ID (sbatch passes the environment on). Kubernetes: the
    container's env of the TrainJob (a pod starts from the image's environment).
    """
    spec = RunSpec(nproc=1, nnodes=2, out="runs/x", device="neuron")
    if kind == "slurm":
        text = slurm_script(spec, on_trn2=True, python=sys.executable, workdir=str(tmp_path))
        lines = [ln for ln in text.splitlines() if ln.startswith(("export ", "unset "))]
        script = "\n".join([f"head_ip={head_ip}", f"port={port}", *lines, "env -0"])
        shell = {"PATH": os.environ["PATH"], "NEURON_RT_ROOT_COMM_ID": "10.0.0.1:62182"}
        out = subprocess.run(["bash", "-c", script], env=shell, capture_output=True, check=True)
        pairs = [kv.split("=", 1) for kv in out.stdout.decode().split("\0") if "=" in kv]
        return {k: v for k, v in pairs if k not in ("PWD", "SHLVL", "_", "PATH")}
    job = trainjob_manifests(spec.replace(out="/fsx/runs/x"), on_trn2=True, image="r/q:1")[-1]
    container = job["spec"]["trainer"]
    return {e["name"]: e["value"] for e in container.get("env", [])}


@pytest.mark.long
@pytest.mark.slow
@pytest.mark.parametrize("kind", ["slurm", "kubernetes"])
def test_root_communicator_is_rank_0s_when_the_rendezvous_host_is_not(kind, tmp_path):
    """Two torchrun agents on one machine, nodes 127.0.0.9 (the rendezvous host) and
    127.0.0.10, with the job file's environment; c10d makes .10 rank 0 (sorted
    descriptors). Every rank must use a root communicator on rank 0's node, the one
    rank 0 binds (the double fails the bind elsewhere, as the runtime would)."""
    host, other = "127.0.0.9", "127.0.0.10"
    port = _free_port()
    record = tmp_path / "seen"
    env = install(tmp_path / "double", record=record)
    env.pop("NEURON_RT_ROOT_COMM_ID", None)
    env.update(job_environment(kind, tmp_path, host, port))
    env["TORCH_NEURONX_NEFF_CACHE_DIR"] = str(tmp_path / "neff")
    agents = []
    for addr, is_host in ((host, "true"), (other, "false")):
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes=2",
               "--nproc-per-node=1", "--rdzv-backend=c10d", f"--rdzv-endpoint={host}:{port}",
               f"--rdzv-conf=is_host={is_host},join_timeout=60", f"--local-addr={addr}",
               "-m", "fake_torch_neuronx.rank_probe"]  # fmt: skip
        agents.append(subprocess.Popen(
            cmd, env={**env, NODE_ADDR_VAR: addr, "OMP_NUM_THREADS": "1"}, cwd=ROOT,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        ))  # fmt: skip
    outputs = []
    for agent in agents:
        try:
            outputs.append(agent.communicate(timeout=120)[0])
        except subprocess.TimeoutExpired:  # the other agent failed: say what it said
            agent.kill()
            outputs.append(agent.communicate()[0] + "\n(killed after 120 s)")
    seen = {json.loads(p.read_text())["rank"]: json.loads(p.read_text())
            for p in record.glob("rank*.json")}  # fmt: skip
    errors = [ln for out in outputs for ln in out.splitlines() if "fake_torch_neuronx" in ln]
    assert sorted(seen) == [0, 1], outputs
    assert seen[0]["node"] == other and seen[1]["node"] == host  # the host is not rank 0
    assert seen[0]["master_addr"] == other  # torchrun: MASTER_ADDR is rank 0's
    roots = {s["root_comm_id"] for s in seen.values()}
    assert len(roots) == 1 and roots.pop().startswith(f"{other}:"), (seen, errors)
    assert [a.returncode for a in agents] == [0, 0], errors or outputs


def test_no_job_file_pins_the_root_communicator(tmp_path):
    """Neither job file sets NEURON_RT_ROOT_COMM_ID for the whole job; Slurm's drops one
    the submitting shell exported."""
    assert "NEURON_RT_ROOT_COMM_ID" not in job_environment("slurm", tmp_path, "10.0.0.9", 29501)
    assert "NEURON_RT_ROOT_COMM_ID" not in job_environment("kubernetes", tmp_path, "x", 1)


# --- N7: compiled document attention on neuron -------------------------------------------

#: a child with the double: the tiny model's attention (as our trainer configures it)
#: compiled by the `neuron` backend on one batch, boundaries marked as the trainer would
COMPILE_ATTENTION = r"""
import json, sys, torch
from qwen3_trn_helpers.model.attention import (DocumentMaskedSDPA, mark_document_count_dynamic)
from torchtitan.models.common.attention import ScaledDotProductAttention, VarlenMetadata
from fake_torch_neuronx import dynamo_backend

choice = sys.argv[1]
torch.manual_seed(0)
q, k, v = (torch.randn(2, 512, 4, 64) for _ in range(3))
if choice == "document":
    inner = DocumentMaskedSDPA(DocumentMaskedSDPA.Config())
    outs = []
    for cuts in ([0, 100, 512, 700, 1024], [0, 512, 600, 1024]):  # two packings
        cu = torch.tensor(cuts, dtype=torch.int32)
        meta = VarlenMetadata(cu_seq_q=cu, cu_seq_k=cu, max_q=512, max_k=512)
        mark_document_count_dynamic(meta)
        f = torch.compile(lambda q, k, v, m: inner(q, k, v, attention_masks=m), backend="neuron")
        try:
            outs.append(tuple(f(q, k, v, meta).shape))
        except Exception as e:
            said = [ln for ln in str(e).splitlines() if "static shapes" in ln]
            outs.append((said or str(e).splitlines())[0])
else:
    inner = ScaledDotProductAttention(ScaledDotProductAttention.Config())
    f = torch.compile(lambda q, k, v: inner(q, k, v), backend="neuron")
    outs = [tuple(f(q, k, v).shape)]
print(json.dumps({"outs": outs, **dynamo_backend.SEEN}))
"""


@pytest.mark.long
@pytest.mark.slow
def test_the_double_refuses_compiled_document_attention_and_compiles_causal(tmp_path):
    """What trn2 would do with each attention choice compiled: the document mask's
    boundary count is symbolic (our trainer marks it), which torch-neuronx refuses;
    plain causal attention is one static graph."""
    env = {**install(tmp_path / "double"), "TORCH_NEURONX_NEFF_CACHE_DIR": str(tmp_path / "neff")}
    said = {}
    for choice in ("document", "causal"):
        proc = _run([sys.executable, "-c", COMPILE_ATTENTION, choice], env)
        assert proc.returncode == 0, proc.stderr[-3000:]
        said[choice] = json.loads(proc.stdout.strip().splitlines()[-1])
    assert all("torch-neuronx requires static shapes" in o for o in said["document"]["outs"])
    assert said["document"]["graphs"] == 0 and said["document"]["refused"] >= 1
    assert said["causal"] == {"outs": [[2, 512, 4, 64]], "graphs": 1, "refused": 0,
                              "graph_breaks": 0}  # fmt: skip
    neffs = list((tmp_path / "neff").glob("*/*.neff"))  # <hash>/<hash>.neff
    assert len(neffs) == 1 and neffs[0].stem == neffs[0].parent.name


def test_compiled_document_attention_on_neuron_is_refused_in_planning():
    """N7: refused before anything starts, one line naming the problem and the fix."""
    from qwen3_trn_helpers.training.plan import plan_run

    spec = RunSpec(preset="tiny", compile=True, attention="document", device="neuron")
    with pytest.raises(ConfigError, match="torch-neuronx requires static shapes") as e:
        plan_run(spec, device_type="neuron")
    assert "\n" not in str(e.value) and 'attention="causal"' in str(e.value)
    plan_run(spec.replace(attention="causal"), device_type="neuron")  # the trn2 default
    plan_run(spec.replace(compile=False), device_type="neuron")  # eager document: fine
    plan_run(spec.replace(device="cpu"), device_type="cpu")  # inductor takes symbolic sizes


def test_dynamo_keeps_sizes_static_on_neuron_only():
    """On neuron a changed size is a new static graph, never a symbolic one (AWS's
    gpt_oss example: automatic_dynamic_shapes = False); elsewhere dynamo's default."""
    import torch._dynamo.config as dynamo_config

    from qwen3_trn_helpers.device import DEVICES
    from qwen3_trn_helpers.training.compile import static_shapes

    default = dynamo_config.automatic_dynamic_shapes
    with static_shapes(DEVICES["neuron"]):
        assert dynamo_config.automatic_dynamic_shapes is False
    with static_shapes(DEVICES["cpu"]):
        assert dynamo_config.automatic_dynamic_shapes is default
    assert dynamo_config.automatic_dynamic_shapes is default


@pytest.mark.long
@pytest.mark.slow
@pytest.mark.parametrize("attention", ["document", "causal"])
def test_train_on_neuron_compiled_goes_as_far_as_tensors(attention, tmp_path):
    """`qwen3-trn train --device neuron --compile` with the double: document is refused
    in one line before any process starts; causal is planned, launched with the Neuron
    rank environment and the `neuron` backend, and stops where the double stops, at
    the first tensor made on the device (the double has no kernels)."""
    env = {**install(tmp_path / "double", record=tmp_path / "seen"),
           "TORCH_NEURONX_NEFF_CACHE_DIR": str(tmp_path / "neff")}  # fmt: skip
    cmd = [sys.executable, "-m", "qwen3_trn_helpers", "train", "--device", "neuron",
           "--compile", "--attention", attention, "--preset", "tiny", "--steps", "1",
           "--nproc", "1", "--out", str(tmp_path / "run"), "--no-progress"]  # fmt: skip
    proc = _run(cmd, env)
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0
    if attention == "document":
        errors = [ln for ln in text.splitlines() if ln.startswith("error:")]
        assert len(errors) == 1 and "torch-neuronx requires static shapes" in errors[0], text
        assert "Traceback" not in text and not (tmp_path / "run" / "run.json").exists()
        return
    manifest = json.loads((tmp_path / "run" / "run.json").read_text())
    assert manifest["resolved"]["device"] == "neuron", manifest
    assert manifest["resolved"]["attention"] == "causal", manifest
    assert "torch-neuronx requires static shapes" not in text
    # the rank started the `neuron` process group (torch-neuronx gave it core LOCAL_RANK)
    rank0 = json.loads((tmp_path / "seen" / "rank0.json").read_text())
    assert rank0["visible_cores"] == "0", rank0
    # ... and stopped at the first tensor made on the device (FSDP's shards)
    assert (
        "Could not run 'aten::empty.memory_format' with arguments from the 'neuron'"
        in (manifest["error"])
    ), manifest["error"][:500]


# --- the probe (issue 29, item 6): a training step on a computing `neuron` device --------


def _losses(run: Path) -> list[float]:
    return [json.loads(ln)["loss"] for ln in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.long
@pytest.mark.slow
def test_a_training_step_runs_on_neuron_with_the_cpu_fallback(tmp_path):
    """With the double's opt-in CPU fallback (torch's Python backend route, as
    lessons/toy_device.py), `train --device neuron` runs forward, backward and AdamW on
    `neuron` tensors (FSDP2 on one rank) and its losses follow the CPU's; the operators
    ran through the fallback (the fused AdamW included), not on a plain CPU tensor."""
    env = {**install(tmp_path / "double", record=tmp_path / "seen"),
           "FAKE_TORCH_NEURONX_CPU_FALLBACK": "1"}  # fmt: skip
    common = ["--preset", "tiny", "--steps", "3", "--nproc", "1", "--attention", "causal",
              "--no-progress"]  # fmt: skip
    base = [sys.executable, "-m", "qwen3_trn_helpers", "train"]
    proc = _run([*base, "--device", "neuron", "--out", str(tmp_path / "neuron"), *common], env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    manifest = json.loads((tmp_path / "neuron" / "run.json").read_text())
    assert manifest["resolved"]["device"] == "neuron", manifest
    caught = json.loads((tmp_path / "seen" / "fallback_rank0.json").read_text())["caught"]
    assert {"aten::_fused_adamw_", "aten::mm.out", "aten::nll_loss_backward.grad_input"} <= set(
        caught
    ), caught
    plain = {k: v for k, v in os.environ.items() if not k.startswith("FAKE_TORCH_NEURONX")}
    proc = _run([*base, "--device", "cpu", "--out", str(tmp_path / "cpu"), *common], plain)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # not bitwise: on `neuron` SDPA takes its math path (softmax, bmm), the CPU its flash
    # kernel; measured 3e-5 apart after 3 AdamW steps
    assert _losses(tmp_path / "neuron") == pytest.approx(_losses(tmp_path / "cpu"), abs=2e-3)


# --- N8: the ladder under a class share --------------------------------------------------


def _smoke(tmp_path: Path, env: dict[str, str], *rungs: str) -> dict:
    cmd = [sys.executable, "-m", "qwen3_trn_helpers", "smoke", "--out", str(tmp_path / "smoke")]
    for rung in rungs:
        cmd += ["--rung", rung]
    proc = _run(cmd, env, timeout=600)
    smoke_json = tmp_path / "smoke" / "smoke.json"
    assert smoke_json.exists(), proc.stdout + proc.stderr
    return {r["name"]: r for r in json.loads(smoke_json.read_text())["rungs"]}


@pytest.mark.long
@pytest.mark.slow
def test_registration_rung_on_the_double_without_a_share(tmp_path):
    """The whole instance: torch.neuron sees 64 logical cores (16 chips at LNC 2),
    torch.accelerator, the `neuron` process group and torchtitan all say neuron."""
    env = install(tmp_path / "double")
    env.pop("QWEN3_TRN_NEURON_CORES", None)
    rungs = _smoke(tmp_path, env, "registration")
    assert rungs["registration"]["status"] == "pass", rungs
    assert rungs["registration"]["reason"].startswith("64 neuron devices"), rungs


@pytest.mark.long
@pytest.mark.slow
def test_ladder_under_a_class_share_expects_the_visible_cores_and_skips_64_ranks(tmp_path):
    """N8: with QWEN3_TRN_NEURON_CORES=8-15 the one-process rung sees one core (the
    share's first) and passes; the 64-rank rung is skipped naming the share."""
    env = {**install(tmp_path / "double"), "QWEN3_TRN_NEURON_CORES": "8-15"}
    rungs = _smoke(tmp_path, env, "registration", "4b_native_64ranks")
    assert rungs["registration"]["status"] == "pass", rungs
    assert rungs["registration"]["reason"].startswith("1 neuron devices"), rungs
    full = rungs["4b_native_64ranks"]
    assert full["status"] == "skip", full
    assert "QWEN3_TRN_NEURON_CORES=8-15" in full["reason"] and "64" in full["reason"], full


def test_expected_device_count_follows_the_visible_cores():
    assert smoke.expected_device_count(16, 2, {})[0] == 64
    assert smoke.expected_device_count(16, 1, {})[0] == 128
    count, why = smoke.expected_device_count(
        16, 2, {"NEURON_RT_VISIBLE_CORES": "8", "QWEN3_TRN_NEURON_CORES": "8-15"}
    )
    assert count == 1 and "QWEN3_TRN_NEURON_CORES=8-15" in why
    assert smoke.expected_device_count(16, 2, {"NEURON_RT_VISIBLE_CORES": "0-3,8"})[0] == 5


# --- N9: device-memory peaks --------------------------------------------------------------

GIB = 2**30


def _ladder_with_a_64_rank_job(tmp_path, monkeypatch, job) -> dict:
    """run_ladder's 64-rank rung on a trn2 whose sysfs is the double's tree; the rung's
    training is ``job`` (what it does to the counters), its run folder a pass."""
    monkeypatch.setattr(smoke.device_memory, "SYSFS_ROOT", tmp_path / "sys")
    monkeypatch.setattr(smoke.ladder, "_device_type", lambda: "neuron")
    monkeypatch.setattr(smoke.ladder, "_hub_online", lambda: False)
    monkeypatch.setattr(smoke.ladder, "_checkpoint_cached", lambda repo: False)

    def climb(rung, out, on_neuron, online=False, across=None):
        job(tmp_path / "sys")
        rung.status, rung.reason, rung.memory = "pass", "2 steps", {"estimated_gib": {}}

    monkeypatch.setattr(smoke.ladder, "_climb", climb)
    smoke.run_ladder(tmp_path / "out", only=["4b_native_64ranks"], echo=False)
    rungs = json.loads((tmp_path / "out" / "smoke.json").read_text())["rungs"]
    return rungs[0]["memory"]["device"]


def test_device_memory_peaks_are_this_rungs_per_logical_core(tmp_path, monkeypatch):
    """N9: an earlier job's 10 GiB peak is reset before the rung; the rung's 2 GiB on
    physical cores 2 and 3 of chip 0 is logical core 1's 4 GiB at LNC 2; the driver's
    version is recorded."""
    root = sysfs.build(tmp_path / "sys", chips=2)
    sysfs.use(root, 0, 0, "tensors", 10 * GIB)  # an earlier job ...
    sysfs.release(root, 0, 0, "tensors")  # ... gone; its peak stays

    def job(root):
        for core in (2, 3):
            sysfs.use(root, 0, core, "tensors", 2 * GIB)
        sysfs.use(root, 1, 7, "model_code", GIB // 2)

    device = _ladder_with_a_64_rank_job(tmp_path, monkeypatch, job)
    assert device["driver"] == sysfs.DRIVER_VERSION and device["peaks_reset"] is True
    peaks = device["peak_gib_per_logical_core_by_category"]
    assert peaks["tensors"] == 4.0 and peaks["model_code"] == 0.5, device
    assert device["lnc"] == 2


def test_device_memory_without_resetting_gives_totals_before_and_after(tmp_path, monkeypatch):
    """Counters root owns: not reset, so the totals held before and after stand beside
    the peaks, with the reason. (This machine runs tests as root, so the refused write
    is the one thing stubbed: smoke.device_memory._reset_peak.)"""
    root = sysfs.build(tmp_path / "sys", chips=1)
    sysfs.use(root, 0, 0, "tensors", GIB)  # held before the rung

    def refused(path):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(smoke.device_memory, "_reset_peak", refused)
    device = _ladder_with_a_64_rank_job(
        tmp_path, monkeypatch, lambda root: sysfs.use(root, 0, 4, "tensors", 3 * GIB)
    )
    assert device["peaks_reset"] is False and "not reset" in device["reason"]
    assert device["totals_before_gib"]["tensors"] == 1.0
    assert device["totals_after_gib"]["tensors"] == 4.0


def test_device_memory_is_null_with_a_reason_where_the_driver_moved_the_counters(
    tmp_path, monkeypatch
):
    sysfs.build(tmp_path / "sys", chips=1, moved=True)
    device = _ladder_with_a_64_rank_job(tmp_path, monkeypatch, lambda root: None)
    assert device["peak_gib_per_logical_core_by_category"] is None
    assert "driver 2.31 moved sysfs nodes" in device["reason"]
    assert device["driver"] == sysfs.DRIVER_VERSION


# --- the double itself ---------------------------------------------------------------------


def test_every_rule_of_the_double_is_listed_in_the_testing_page():
    page = (ROOT / "docs" / "testing.md").read_text()
    for rule, source in RULES:
        assert rule in page and source in page, rule


def test_neff_cache_lock_times_out_when_another_compile_holds_it(tmp_path, monkeypatch):
    """A rank waiting on another's compile of the same graph gives up after
    TORCH_NEURONX_NEFF_CACHE_LOCK_TIMEOUT seconds (1200 by default)."""
    import fcntl

    import torch
    from fake_torch_neuronx import neff_cache

    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("TORCH_NEURONX_NEFF_CACHE_LOCK_TIMEOUT", raising=False)
    assert neff_cache.lock_timeout_s() == 1200
    gm = torch.fx.symbolic_trace(torch.nn.ReLU())
    inputs = [torch.zeros(2)]
    key = neff_cache.graph_hash(gm, inputs)
    (tmp_path / key).mkdir()
    with open(tmp_path / key / f"{key}.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # another process's compile, in progress
        monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_LOCK_TIMEOUT", "0.2")
        with pytest.raises(neff_cache.NeffCacheLockTimeout, match="LOCK_TIMEOUT"):
            neff_cache.compile_into_cache(gm, inputs)
    neff = neff_cache.compile_into_cache(gm, inputs)  # free again: written, then read
    assert neff == tmp_path / key / f"{key}.neff" and neff_cache.compile_into_cache(gm, inputs)


def test_neuron_ls_of_the_double_is_read_as_2_33s(tmp_path, monkeypatch):
    from qwen3_trn_helpers.device import neuron_ls_query

    env = install(tmp_path / "double", chips=16)
    monkeypatch.setenv("PATH", env["PATH"])
    chips, how = neuron_ls_query()
    assert how == "neuron-ls --json-output" and len(chips) == 16
    assert {c["nc_count"] for c in chips} == {4}


# --- the compile rung's shape and the NEFF cache's lock ------------------------------------


def test_compile_rung_meets_nki_flash_attentions_conditions():
    """Sequence a multiple of 512, head_dim at most 128, no mask (causal): the shape at
    which AWS's compile path uses NKI flash attention; still the tiny model."""
    from qwen3_trn_helpers.training.plan import plan_run

    cmd = smoke.compile_step_command(Path("out"))
    flags = cmd[cmd.index("train") + 1 :]
    args = dict(zip(flags[::2], flags[1::2], strict=False))
    spec = RunSpec(preset=args["--preset"], seq_len=int(args["--seq-len"]), compile=True,
                   attention=args["--attention"], device="neuron", steps=1)  # fmt: skip
    plan = plan_run(spec, device_type="neuron")
    assert plan.seq_len % 512 == 0 and plan.shape.head_dim <= 128
    assert plan.attention == "causal" and plan.preset.name == "tiny"


def test_neff_cache_lock_timeout_covers_a_full_size_first_compile(tmp_path):
    """torch-neuronx gives up on the lock after 1200 s by default; every rank the
    ladder or a launch starts on trn2, and both job files, get 3600 s (a user's value
    stays)."""
    from qwen3_trn_helpers.runs.neuron_cores import neuron_rank_environment

    var = "TORCH_NEURONX_NEFF_CACHE_LOCK_TIMEOUT"
    assert int(neuron_rank_environment({})[var]) >= 3600 > 1200
    assert neuron_rank_environment({var: "7200"})[var] == "7200"
    assert int(job_environment("slurm", tmp_path, "10.0.0.9", 29501)[var]) >= 3600
    assert int(job_environment("kubernetes", tmp_path, "x", 1)[var]) >= 3600
