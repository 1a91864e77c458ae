"""A node that starts 90 s before the rendezvous host still trains (issue 46, item 1).

Kubernetes starts a job's pods minutes apart (image pulls, HyperPod replacing a node);
torchrun's store client on a non-host node gives up after 60 s (torch 2.14.1, 60-112 s
with its retry) however long its join timeout is. Two agents on this machine: the early
one reaches the host through 0.0.0.0, which torch's rule (``_matches_machine_hostname``)
does not count as this machine, so it joins as a client, as a worker pod does; the host
meets it at 127.0.0.1.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from qwen3_trn_helpers.runs.rendezvous import hosts_store_here
from qwen3_trn_helpers.training.metrics_file import read_metrics
from qwen3_trn_helpers.training.ranks import free_port

LATE_S = 90
ONE_THREAD = {**os.environ, "OMP_NUM_THREADS": "1"}


@pytest.mark.slow
@pytest.mark.long
def test_a_node_started_90_s_before_the_host_waits_and_trains(tmp_path):
    port = free_port()
    assert not hosts_store_here(f"0.0.0.0:{port}") and hosts_store_here(f"127.0.0.1:{port}")
    out = tmp_path / "shared"

    def agent(host: str) -> subprocess.Popen:
        cmd = [sys.executable, "-m", "qwen3_trn_helpers", "train", "--no-progress",
               "--nnodes", "2", "--nproc", "1", "--rdzv-endpoint", f"{host}:{port}",
               "--rdzv-timeout", "300", "--steps", "2", "--out", str(out)]  # fmt: skip
        return subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=ONE_THREAD
        )

    started = time.monotonic()
    early = agent("0.0.0.0")
    time.sleep(LATE_S)
    assert early.poll() is None, early.communicate()[0]  # still waiting, not failed
    host = agent("127.0.0.1")
    outputs = [p.communicate(timeout=300)[0] for p in (early, host)]
    (tmp_path / "late-host.log").write_text(
        f"early node (0.0.0.0:{port}):\n{outputs[0]}\nhost ({LATE_S} s later):\n{outputs[1]}"
    )
    assert [early.returncode, host.returncode] == [0, 0], outputs
    assert time.monotonic() - started > LATE_S
    assert f"waiting for the rendezvous host at 0.0.0.0:{port}" in outputs[0]
    assert [r["step"] for r in read_metrics(out / "metrics.jsonl")] == [1, 2]
