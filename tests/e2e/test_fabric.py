"""The fabric check (ops/fabric.py): bus bandwidth as nccl-tests define it, one figure
per node from the node pairs, a floor that fails a slow node; nccom-test's output read.
The long test runs the check for real: three torchrun agents on this machine (every
rank of every node on gloo), one of them slowed, which alone fails."""

from __future__ import annotations

import os
import subprocess

import pytest

from qwen3_trn_helpers.ops import fabric
from qwen3_trn_helpers.ops.fabric import (
    bus_bandwidth,
    default_floor_gb_s,
    nccom_main,
    node_figures,
    node_pairs,
    parse_nccom,
    rounds,
    verdicts,
)
from qwen3_trn_helpers.training.ranks import free_port
from qwen3_trn_helpers.training.spec import RunSpec


def test_bus_bandwidth_is_nccl_tests_definition():
    # algbw = S / t; busbw = algbw * 2 (n - 1) / n (nccl-tests doc/PERFORMANCE.md)
    assert bus_bandwidth(10**9, 1.0, 2) == pytest.approx(1.0)
    assert bus_bandwidth(10**9, 1.0, 4) == pytest.approx(1.5)
    assert bus_bandwidth(10**9, 0.5, 128) == pytest.approx(2 * 2 * 127 / 128)
    with pytest.raises(ValueError):
        bus_bandwidth(10**9, 0.0, 2)


def test_pairs_cover_every_node_and_rounds_never_share_one():
    assert node_pairs(1) == [] and node_pairs(2) == [(0, 1)]
    for nodes in range(3, 18):
        pairs = node_pairs(nodes)
        assert {n for p in pairs for n in p} == set(range(nodes))
        assert all(sum(n in p for p in pairs) == 2 for n in range(nodes))  # two neighbours
        batches = rounds(pairs)
        assert sorted(p for b in batches for p in b) == sorted(pairs)
        for batch in batches:
            members = [n for p in batch for n in p]
            assert len(members) == len(set(members))
        assert len(batches) <= 3  # a ring: 2 rounds for an even count, 3 for an odd one


def test_a_slow_node_alone_falls_below_the_floor():
    fast, slow = 150.0, 20.0
    figures = {(0, 1): fast, (1, 2): slow, (2, 3): slow, (3, 0): fast}  # node 2 is slow
    assert node_figures(figures, 4) == [fast, fast, slow, fast]
    assert [v.passed for v in verdicts(figures, 4, 100.0)] == [True, True, False, True]
    assert all(v.passed for v in verdicts(figures, 4, None))  # no floor: figures only
    # two nodes: nothing tells them apart, both fail (and the job with them)
    assert [v.passed for v in verdicts({(0, 1): slow}, 2, 100.0)] == [False, False]


def test_the_floor_is_a_stated_share_of_trn2_efa_and_none_on_a_cpu():
    assert default_floor_gb_s("neuron") == pytest.approx(0.25 * 3200 / 8)  # 100 GB/s
    assert default_floor_gb_s("cpu") is None
    assert "25% of a trn2.48xlarge's 3.2 Tbps EFA" in fabric.floor_source(100.0, "neuron")
    assert "(--fabric-floor)" in fabric.floor_source(7.0, "neuron")


def test_nccom_output_is_read_or_named():
    text = (
        "    size(B)    count(elems)     type    time(us)    algbw(GB/s)    busbw(GB/s)\n"
        "  268435456        67108864     fp32        1900         141.28         282.56\n"
        "Avg bus bandwidth:      282.5600GB/s\n"
    )
    assert parse_nccom(text) == pytest.approx(282.56)
    with pytest.raises(ValueError, match="no 'Avg bus bandwidth' line: error: EFA not found"):
        parse_nccom("error: EFA not found\n")


def test_nccom_main_runs_nccom_test_through_srun_and_fails_without_a_figure(capsys):
    """nccom-test on the job's allocation (--slurm-mode): a run that printed no figure
    counts 0 GB/s, below any floor: exit 1, and the command it ran named."""
    ran = []

    def run(cmd, capture_output, text):
        ran.append(cmd)
        return subprocess.CompletedProcess(cmd, 1, "NRT init failed\n", "")

    code = nccom_main(["--nproc", "64", "--nnodes", "3", "--job-id", "42"], run=run)
    out, err = capsys.readouterr()
    assert code == 1 and out.startswith("fail: all 3 nodes (192 ranks): nccom-test bus ")
    assert ran[0][-3:] == ["--slurm-mode", "--slurm-job-id", "42"] and "-N" in ran[0]
    assert "printed no 'Avg bus bandwidth' line: NRT init failed" in err


# --- for real: three agents, every rank, one node slowed -----------------------------------

#: loaded by every rank as sitecustomize: on node SLOW_NODE every large all-reduce waits
#: SLOW_S first (a node whose links are slow: its pairs' all-reduces take longer)
SLOW_HOOK = """
import os
if os.environ.get("GROUP_RANK") == os.environ.get("SLOW_NODE"):
    import time
    import torch.distributed as dist
    _all_reduce = dist.all_reduce
    def slow(tensor, *args, **kwargs):
        if tensor.numel() > 100_000:
            time.sleep(float(os.environ["SLOW_S"]))
        return _all_reduce(tensor, *args, **kwargs)
    dist.all_reduce = slow
"""


@pytest.mark.slow
@pytest.mark.long
def test_every_rank_of_three_nodes_and_the_slow_node_fails(tmp_path):
    """Three torchrun agents (nodes) of 2 ranks each run the collectives rung through
    the command the Slurm script runs: all 6 ranks join, each node prints its bus
    bandwidth, and node 2, slowed, fails against a floor between the two speeds."""
    from qwen3_trn_helpers.ops.smoke import _command, _rungs

    rung = next(r for r in _rungs(full_size=False) if r.name == "collectives")
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(SLOW_HOOK)
    path = os.pathsep.join(filter(None, [str(hooks), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": "1", "SLOW_NODE": "2",
           "SLOW_S": "1.0", fabric.FLOOR_ENV: "0.02", fabric.BYTES_ENV: str(4 * 2**20)}  # fmt: skip
    across = RunSpec(nnodes=3, nproc=2, rdzv_endpoint=f"127.0.0.1:{free_port()}",
                     rdzv_timeout=120, out="x")  # fmt: skip
    cmd = _command(rung, tmp_path, across)
    assert "--nproc-per-node=2" in cmd and "--nnodes=3" in cmd  # every rank
    agents = [
        subprocess.Popen(
            cmd,
            env={**env, "AGENT": str(i)},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )  # fmt: skip
        for i in range(3)
    ]
    outputs = [a.communicate(timeout=600)[0] for a in agents]
    said = {}
    for out, agent in zip(outputs, agents, strict=True):
        for line in out.splitlines():
            if line.startswith(("ok: node", "fail: node")):
                node = int(line.split("node ")[1].split(" ")[0])
                said[node] = (line, agent.returncode)
    assert sorted(said) == [0, 1, 2], outputs
    for node in (0, 1):
        line, code = said[node]
        assert code == 0 and line.startswith(f"ok: node {node} of 3"), line
        assert "6 ranks on cpu (gloo)" in line and "bus bandwidth" in line
        assert "floor 0.02 GB/s" in line
    line, code = said[2]
    assert code != 0 and line.startswith("fail: node 2 of 3"), line
    assert "is below the floor" in line
    figure = float(line.split("bus bandwidth ")[1].split(" GB/s")[0])
    assert figure < 0.02  # 4 MiB per second at most: far below
    print("\n".join(s[0] for s in said.values()))  # the figures measured, for the record
