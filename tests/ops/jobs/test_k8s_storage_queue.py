"""Kubernetes jobs' storage and queue (ops/jobs/k8s_storage_queue.py): ``--pvc`` and the
namespace the claim must be in, a corpus off the mounted volume refused, ``--queue`` as
Kueue's label; each manifest checked against the operators' own schemas."""

from __future__ import annotations

import pytest
import yaml

from qwen3_trn_helpers.cli import main
from qwen3_trn_helpers.ops.jobs.k8s_storage_queue import KUEUE_QUEUE_LABEL
from qwen3_trn_helpers.ops.jobs.kubernetes import pytorchjob_manifest, trainjob_manifests
from qwen3_trn_helpers.training.spec import RunSpec

TRN2 = RunSpec(nproc=64, nnodes=2, out="/fsx/runs/q4b", device="neuron", steps=10)
IMAGE = "registry/qwen3-trn:0.2"
BASE = ["k8s", "--nnodes", "2", "--device", "cpu", "--steps", "2", "--out", "/fsx/runs/x",
        "--image", IMAGE]  # fmt: skip


def claim_of(pod_spec: dict) -> str:
    shared = next(v for v in pod_spec["volumes"] if v["name"] == "shared")
    return shared["persistentVolumeClaim"]["claimName"]


def test_pvc_is_named_and_the_note_says_its_namespace(capsys):
    assert main([*BASE, "--api", "pytorchjob", "--hyperpod", "--pvc", "team-fsx"]) == 0
    out, err = capsys.readouterr()
    job = yaml.safe_load(out)
    assert claim_of(job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]) == (
        "team-fsx"
    )
    assert err.strip().splitlines() == [
        "note: the pods mount PersistentVolumeClaim 'team-fsx' at /fsx; a claim is "
        "namespaced: it must exist in namespace 'kubeflow' (kubectl get pvc team-fsx -n "
        "kubeflow), or the pods stay Pending (--pvc NAME)"
    ]
    assert main(BASE) == 0  # no namespace given: kubectl's, and AWS's samples' claim name
    out, err = capsys.readouterr()
    runtime, _ = list(yaml.safe_load_all(out))
    assert claim_of(runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]
                    ["spec"]["template"]["spec"]) == "fsx-claim"  # fmt: skip
    assert "it must exist in the namespace you apply this in" in err
    assert main([*BASE, "--pvc", "FSx Claim"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: --pvc 'FSx Claim' is not a claim name") and err.count("\n") == 1


@pytest.mark.parametrize("corpus", ["/data/c4", "/fsx/../data/c4"])
def test_a_corpus_off_the_mounted_volume_is_refused(capsys, corpus):
    assert main([*BASE, "--corpus", corpus]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: --corpus {corpus} is outside the volume every pod mounts at")
    assert "claim 'fsx-claim'" in err and err.count("\n") == 1


def test_a_corpus_on_the_volume_or_a_named_one_is_taken(capsys):
    assert main([*BASE, "--corpus", "/fsx/data/c4-prepared"]) == 0
    assert main([*BASE, "--corpus", "embedded"]) == 0


def test_queue_is_kueues_label_and_drops_volcano():
    """Kueue's label on the job's own metadata (its docs: metadata.labels), and no Volcano
    gang scheduler: Kueue admits the job whole. Both manifests pass the operators' own
    schemas."""
    pytorch = pytest.importorskip("pytorchjob_schema", reason="kubeflow-training not installed")
    trainer = pytest.importorskip("trainjob_schema", reason="kubeflow-trainer-api not installed")
    job = pytorchjob_manifest(TRN2, on_trn2=True, image=IMAGE, queue="team-a-queue")
    pytorch.validate_pytorchjob(job)
    assert job["metadata"]["labels"] == {KUEUE_QUEUE_LABEL: "team-a-queue"}
    pod = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    assert "schedulerName" not in pod and "schedulingPolicy" not in job["spec"]["runPolicy"]
    runtime, train = trainjob_manifests(TRN2, on_trn2=True, image=IMAGE, queue="team-a-queue")
    for obj in (runtime, train):
        trainer.validate_trainer_object(obj)
    assert train["metadata"]["labels"] == {KUEUE_QUEUE_LABEL: "team-a-queue"}
    assert "podGroupPolicy" not in runtime["spec"]
    plain_runtime, plain = trainjob_manifests(TRN2, on_trn2=True, image=IMAGE)
    assert "labels" not in plain["metadata"] and "podGroupPolicy" in plain_runtime["spec"]


def test_a_queue_name_kubernetes_would_refuse_is_one_line(capsys):
    assert main([*BASE, "--queue", "team a; rm -rf /"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: --queue 'team a; rm -rf /' is not a LocalQueue name")
    assert err.count("\n") == 1
