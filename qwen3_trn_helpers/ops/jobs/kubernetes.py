"""Kubernetes job files: a Kubeflow TrainJob (Trainer v2, what a plain EKS cluster
installs) or PyTorchJob (v1, HyperPod's), one pod per node, each starting the same
``qwen3-trn train`` command (torchrun with its c10d rendezvous). Shared storage is
mounted at ``SHARED_DIR_K8S``; on SageMaker HyperPod the manifest carries what its job
auto-resume needs. Every user value is data: names are checked against the rules
Kubernetes applies, paths must be absolute as the pods see them. Text only."""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

from ...errors import ConfigError
from ...training.compile import NEFF_CACHE_LOCK_TIMEOUT_S, NEFF_CACHE_LOCK_TIMEOUT_VAR
from ...training.spec import RunSpec
from .common import (
    NEFF_CACHE_VAR,
    RDZV_PORT,
    TRN2_NODE_ENV,
    _check,
    _check_cluster_paths,
    _train_args,
)
from .k8s_storage_queue import DEFAULT_PVC, check_pvc, queue_labels, refuse_corpus_outside

#: pods on EKS also name the interface the Neuron collectives' bootstrap uses
#: (aws-neuron-eks-samples: CCOM_SOCKET_IFNAME=eth0, "often required on EKS")
TRN2_POD_ENV = {**TRN2_NODE_ENV, "CCOM_SOCKET_IFNAME": "eth0"}
#: a trn2.48xlarge's devices, as Kubernetes' Neuron and EFA device plugins name them
NEURON_DEVICES = 16
EFA_INTERFACES = 16
#: what a trn2 pod requests (= limits: Guaranteed QoS, evicted last). A trn2.48xlarge
#: has 192 vCPUs and 2 TiB; the rest is left to the kubelet and the device plugins.
#: Hugepages: AWS's EKS EFA examples request 2 MiB hugepages for libfabric (5120Mi)
TRN2_POD_RESOURCES = {"cpu": "184", "memory": "1900Gi", "hugepages-2Mi": "5120Mi"}
CPU_POD_RESOURCES = {"cpu": "4", "memory": "16Gi"}


SHARED_DIR_K8S = "/fsx"  # where the job mounts shared storage (FSx for Lustre)

#: seconds a pod has after SIGTERM to save its step before SIGKILL
POD_GRACE_S = 300
#: SageMaker HyperPod (EKS): what its job auto-resume needs ("Running jobs using
#: kubectl", SageMaker developer guide, sagemaker-hyperpod-eks-run-jobs-kubectl): the two
#: annotations, restartPolicy OnFailure, a node selector for nodes its health checks
#: passed, the kubeflow namespace or one prefixed hyperpod, and Kubeflow Training
#: Operator 1.7.0, 1.8.0 or 1.8.1. HyperPod's nodes carry their ml. instance type.
HYPERPOD_AUTO_RESUME = "sagemaker.amazonaws.com/enable-job-auto-resume"
HYPERPOD_MAX_RETRY = "sagemaker.amazonaws.com/job-max-retry-count"
HYPERPOD_HEALTH = {"sagemaker.amazonaws.com/node-health-status": "Schedulable"}
HYPERPOD_INSTANCE_TYPE = "ml.trn2.48xlarge"
HYPERPOD_NAMESPACE = "kubeflow"
#: a replaced node joins after HyperPod's health checks: AWS's HyperPod guide has
#: torchrun wait 1800 s for the rendezvous (--rdzv-conf=timeout=1800) for that reason
HYPERPOD_RDZV_TIMEOUT_S = 1800


def _k8s_out(spec: RunSpec) -> str:
    """``--out`` normalised (``..`` resolved) and under the shared volume."""
    out = os.path.normpath(spec.out) if spec.out else ""
    if not os.path.isabs(out) or not Path(out).is_relative_to(SHARED_DIR_K8S):
        raise ConfigError(
            f"--out must be on the shared volume every pod mounts at {SHARED_DIR_K8S} "
            f"(for example {SHARED_DIR_K8S}/runs/qwen3), got {spec.out} (as {out or 'empty'})"
        )
    return out


#: a Kubernetes name for the objects we write: an RFC 1035 label (lower-case letters,
#: digits and '-', a letter first, no '-' last), the rule the training operator's
#: PyTorchJob webhook applies (IsDNS1035Label; tests/pytorchjob_schema.py); every RFC
#: 1035 label is an RFC 1123 label too. Namespaces are RFC 1123 labels (a digit first).
_DNS1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")


_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


LABEL_MAX = 63


#: a TrainJob's JobSet names its Job NAME-node-0 (replicated job "node", index 0), and
#: that name is a label value too: at most 63 characters in all (JobSet's webhook)
TRAINJOB_NAME_MAX = LABEL_MAX - len("-node-0")


def check_k8s_name(value: str, flag: str, *, limit: int = LABEL_MAX) -> str:
    """``value`` if Kubernetes accepts it as ``flag`` names it, else one line saying
    why: a name with a newline, a quote, upper case or 80 characters had been written
    into the manifest, for ``kubectl apply`` to refuse later."""
    rule = _DNS1123_LABEL if flag == "--namespace" else _DNS1035_LABEL
    first = "a letter or digit" if flag == "--namespace" else "a letter"
    if len(value) > limit:
        raise ConfigError(
            f"{flag} {value!r} has {len(value)} characters; Kubernetes takes at most "
            f"{limit} here: shorten it"
        )
    if not (value.isascii() and rule.fullmatch(value)):
        raise ConfigError(
            f"{flag} {value!r} is not a name Kubernetes accepts: lower-case letters, digits "
            f"and '-' only, starting with {first} and not ending in '-' "
            f"(for example {'qwen3-runs' if flag == '--namespace' else 'qwen3-4b-run1'})"
        )
    return value


def pod_path_free(spec: RunSpec) -> RunSpec:
    """``spec`` for the checks made on the machine that writes a Kubernetes manifest:
    ``--init``, ``--corpus`` and ``--tokenizer`` name files in the pods (under /fsx),
    which this machine need not have (they had to exist here). Each must be absolute,
    as the pods see it; the checks here then plan with stand-ins (random weights of the
    preset's shape, the embedded text, the offline tokenizer), and each pod checks the
    real files when its ``qwen3-trn train`` starts."""
    from ...data.corpus import EMBEDDED, EMBEDDED_PRETRAIN

    paths = {
        "init": spec.init not in ("random", "pretrained"),
        "corpus": bool(spec.corpus)
        and spec.corpus not in (EMBEDDED, EMBEDDED_PRETRAIN)
        and ("/" in spec.corpus or bool(Path(spec.corpus).suffix)),
        "tokenizer": spec.tokenizer is not None,
    }
    stand_ins = {"init": "random", "corpus": EMBEDDED, "tokenizer": None}
    changes = {}
    for name, is_path in paths.items():
        value = getattr(spec, name)
        if not is_path:
            continue
        if not os.path.isabs(value):
            raise ConfigError(
                f"--{name} {value!r} names a path in the job's pods, which start elsewhere: "
                f"give it as the pods see it, absolute (for example {SHARED_DIR_K8S}/...)"
            )
        changes[name] = stand_ins[name]
    return spec.replace(**changes)


def _metadata(name: str, namespace: str | None, queue: str | None = None) -> dict:
    labels = queue_labels(queue)  # (Kueue: k8s_storage_queue.py)
    return {
        "name": name,
        **({"namespace": namespace} if namespace else {}),
        **({"labels": labels} if labels else {}),
    }


def _k8s_parts(spec: RunSpec, on_trn2: bool, image: str, efa: int | None, pvc: str):
    """What both Kubernetes APIs share: the checked spec, env, resources, volumes."""
    if not image or not image.strip():
        raise ConfigError("--image is empty: name the container image (registry/name:tag)")
    spec = _check(spec, **{"--image": image})
    spec = spec.replace(out=_k8s_out(spec))
    refuse_corpus_outside(spec.corpus, SHARED_DIR_K8S, check_pvc(pvc))
    efa = EFA_INTERFACES if efa is None else efa
    if efa < 0 or efa > EFA_INTERFACES:
        raise ConfigError(f"--efa must be 0 to {EFA_INTERFACES} (a trn2.48xlarge's), got {efa}")
    env = dict(TRN2_POD_ENV) if on_trn2 else {}
    if on_trn2:
        env[NEFF_CACHE_VAR] = str(Path(spec.out).parent / "neff-cache")  # shared volume
        env[NEFF_CACHE_LOCK_TIMEOUT_VAR] = str(NEFF_CACHE_LOCK_TIMEOUT_S)
    devices: dict[str, str] = {}
    if on_trn2:
        devices["aws.amazon.com/neuron"] = str(NEURON_DEVICES)
        if efa:
            devices["vpc.amazonaws.com/efa"] = str(efa)
    amounts = {**(TRN2_POD_RESOURCES if on_trn2 else CPU_POD_RESOURCES), **devices}
    resources = {"limits": dict(amounts), "requests": dict(amounts)}  # Guaranteed QoS
    volumes = [
        # torch's data loaders and the Neuron runtime share memory through /dev/shm;
        # a container's default is 64 MiB
        {"name": "shm", "emptyDir": {"medium": "Memory"}},
        {"name": "shared", "persistentVolumeClaim": {"claimName": pvc}},
    ]
    mounts = [
        {"name": "shm", "mountPath": "/dev/shm"},
        {"name": "shared", "mountPath": SHARED_DIR_K8S},
    ]
    env_list = [{"name": k, "value": v} for k, v in env.items()]
    return spec, env_list, resources, volumes, mounts


def _pod_basics(on_trn2: bool, hyperpod: bool = False) -> dict:
    basics: dict = {"terminationGracePeriodSeconds": POD_GRACE_S}
    selector = {}
    if on_trn2:  # HyperPod's nodes carry the ml. name of their instance type
        kind = HYPERPOD_INSTANCE_TYPE if hyperpod else "trn2.48xlarge"
        selector["node.kubernetes.io/instance-type"] = kind
    if hyperpod:  # only nodes HyperPod's health checks passed
        selector.update(HYPERPOD_HEALTH)
    if selector:
        basics["nodeSelector"] = selector
    return basics


def hyperpod_namespace(namespace: str | None) -> str:
    """The namespace a HyperPod job runs in: ``kubeflow`` by default, or one prefixed
    ``hyperpod``; any other is one line (auto-resume does not watch it)."""
    if namespace is None:
        return HYPERPOD_NAMESPACE
    if namespace != HYPERPOD_NAMESPACE and not namespace.startswith("hyperpod"):
        raise ConfigError(
            f"--namespace {namespace!r}: HyperPod's job auto-resume runs only in the "
            f"{HYPERPOD_NAMESPACE} namespace or one prefixed hyperpod: pass --namespace "
            f"{HYPERPOD_NAMESPACE} (or hyperpod-...)"
        )
    return namespace


def _k8s_command(spec: RunSpec, python: str | None, endpoint: str) -> list[str]:
    """The container's command: ``qwen3-trn train`` with the cluster's Python (data)."""
    python = python or "python"
    _check_cluster_paths(python, "/", bare_python=True)
    train = shlex.join([python, "-m", "qwen3_trn_helpers", "train", *_train_args(spec)])
    return ["bash", "-c", f"exec {train} {endpoint}"]


def _working_dir(workdir: str | None) -> dict:
    if workdir is None:
        return {}
    _check_cluster_paths("/", workdir, bare_python=False)
    return {"workingDir": workdir}  # Kubernetes' own field: no shell reads it


def pytorchjob_manifest(
    spec: RunSpec,
    *,
    on_trn2: bool,
    image: str,
    name: str | None = None,
    efa: int | None = None,
    namespace: str | None = None,
    hyperpod: bool = False,
    python: str | None = None,
    workdir: str | None = None,
    pvc: str = DEFAULT_PVC,
    queue: str | None = None,
) -> dict:
    """A Kubeflow PyTorchJob (kubeflow.org/v1, HyperPod's) running ``spec`` on
    ``spec.nnodes`` pods.

    ``hyperpod``: the job SageMaker HyperPod's auto-resume takes over (AWS's "Running
    jobs using kubectl"): its two annotations (the retry count is ``--max-restarts``),
    ``OnFailure``, nodes selected by ``ml.trn2.48xlarge`` and a ``Schedulable`` health
    status, the ``kubeflow`` namespace (or one prefixed ``hyperpod``), a rendezvous
    that waits 1800 s for a replaced node; no Volcano (HyperPod schedules with the
    default scheduler, or Kueue under its task governance; a pod naming a scheduler the
    cluster lacks never runs).
    ``python`` / ``workdir``: the image's interpreter and folder, if not ``python`` on
    its PATH and its own working directory.

    The elastic form, Workers only: the training operator then sets the rendezvous
    (``PET_RDZV_ENDPOINT``, worker 0's address) and none of RANK / WORLD_SIZE, which a
    process started by torchrun would otherwise read as its own. min = max replicas:
    a fixed world, as the layout needs. ``runPolicy`` is written out (the SDK's models
    require it). Shared storage is the PersistentVolumeClaim ``pvc`` (of the job's
    namespace) at ``/fsx``; ``--out`` and a corpus folder must be under it. Restarts: a
    failed pod is restarted (``OnFailure``, what HyperPod's auto-resume needs) up to
    ``backoffLimit`` times and resumes; gang scheduling through Volcano (the operator
    started with ``--gang-scheduler-name=volcano``), all pods or none, unless ``queue``
    names a Kueue LocalQueue, which then admits the job whole (k8s_storage_queue.py).
    """
    name = f"qwen3-trn-{spec.variant}".replace("_", "-") if name is None else name
    check_k8s_name(name, "--name")
    if namespace is not None:
        check_k8s_name(namespace, "--namespace")
    if hyperpod:
        namespace = hyperpod_namespace(namespace)
        spec = spec.replace(rdzv_timeout=max(spec.rdzv_timeout, HYPERPOD_RDZV_TIMEOUT_S))
    spec, env, resources, volumes, mounts = _k8s_parts(spec, on_trn2, image, efa, pvc)
    volcano = not hyperpod and queue is None  # (HyperPod, Kueue: the default scheduler)
    container = {
        "name": "pytorch",  # the operator reads the port from the container of this name
        "image": image,
        "command": _k8s_command(spec, python, '--rdzv-endpoint "$PET_RDZV_ENDPOINT"'),
        **_working_dir(workdir),
        "env": env,
        "ports": [{"name": "pytorchjob-port", "containerPort": RDZV_PORT}],
        "resources": resources,
        "volumeMounts": mounts,
    }
    pod_spec = {
        **_pod_basics(on_trn2, hyperpod),
        **({"schedulerName": "volcano"} if volcano else {}),
        "restartPolicy": "OnFailure",
        "containers": [container],
        "volumes": volumes,
    }
    metadata = _metadata(name, namespace, queue)
    run_policy: dict = {"cleanPodPolicy": "None", "backoffLimit": spec.max_restarts}
    if hyperpod:
        metadata["annotations"] = {
            HYPERPOD_AUTO_RESUME: "true",
            HYPERPOD_MAX_RETRY: str(spec.max_restarts),
        }
    if volcano:
        run_policy["schedulingPolicy"] = {"minAvailable": spec.nnodes}  # gang: all or none
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": metadata,
        "spec": {
            "elasticPolicy": {
                "rdzvBackend": "c10d",
                "minReplicas": spec.nnodes,
                "maxReplicas": spec.nnodes,
                "maxRestarts": spec.max_restarts,
            },
            "runPolicy": run_policy,
            "pytorchReplicaSpecs": {
                "Worker": {
                    "replicas": spec.nnodes,
                    "restartPolicy": "OnFailure",
                    "template": {"spec": pod_spec},
                }
            },
        },
    }


def trainjob_manifests(
    spec: RunSpec,
    *,
    on_trn2: bool,
    image: str,
    name: str | None = None,
    efa: int | None = None,
    namespace: str | None = None,
    python: str | None = None,
    workdir: str | None = None,
    pvc: str = DEFAULT_PVC,
    queue: str | None = None,
) -> list[dict]:
    """A Kubeflow Trainer v2 TrainingRuntime and the TrainJob that uses it.

    The runtime (trainer.kubeflow.org/v1alpha1, namespaced) holds what the TrainJob API
    cannot say: the pod's volumes, node selector, grace time, gang scheduling
    (``podGroupPolicy.volcano``) and the JobSet's restarts (``failurePolicy.maxRestarts``:
    every pod recreated, the run resumes). The TrainJob holds the image, the command,
    the environment and the resources per node. Trainer v2 sets ``PET_MASTER_ADDR`` /
    ``PET_MASTER_PORT`` (node 0 of the JobSet): the rendezvous endpoint. ``pvc`` and
    ``queue``: as :func:`pytorchjob_manifest`'s (with a Kueue queue, no Volcano pod group).
    """
    name = f"qwen3-trn-{spec.variant}".replace("_", "-") if name is None else name
    check_k8s_name(name, "--name", limit=TRAINJOB_NAME_MAX)
    if namespace is not None:
        check_k8s_name(namespace, "--namespace")
    spec, env, resources, volumes, mounts = _k8s_parts(spec, on_trn2, image, efa, pvc)
    runtime = f"{name}-runtime"
    endpoint = '--rdzv-endpoint "$PET_MASTER_ADDR:$PET_MASTER_PORT"'
    command = _k8s_command(spec, python, endpoint)
    pod_spec = {
        **_pod_basics(on_trn2),
        "restartPolicy": "Never",  # the JobSet restarts the whole job (failurePolicy)
        "containers": [
            {
                "name": "node",  # Trainer v2's trainer container
                "image": image,
                **_working_dir(workdir),
                "volumeMounts": mounts,
            }
        ],
        "volumes": volumes,
    }
    training_runtime = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainingRuntime",
        "metadata": _metadata(runtime, namespace),
        "spec": {
            "mlPolicy": {"numNodes": spec.nnodes, "torch": {}},
            # gang scheduling, all pods or none (a Kueue queue admits the job whole instead)
            **({} if queue else {"podGroupPolicy": {"volcano": {}}}),
            "template": {
                "spec": {
                    "failurePolicy": {"maxRestarts": spec.max_restarts},
                    "replicatedJobs": [
                        {
                            "name": "node",
                            "replicas": 1,
                            "template": {
                                "metadata": {
                                    "labels": {
                                        "trainer.kubeflow.org/trainjob-ancestor-step": "trainer"
                                    }
                                },
                                "spec": {"backoffLimit": 0, "template": {"spec": pod_spec}},
                            },
                        }
                    ],
                }
            },
        },
    }
    train_job = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": _metadata(name, namespace, queue),
        "spec": {
            "runtimeRef": {
                "apiGroup": "trainer.kubeflow.org",
                "kind": "TrainingRuntime",
                "name": runtime,
            },
            "trainer": {
                "image": image,
                "numNodes": spec.nnodes,
                "command": command,
                "env": env,
                "resourcesPerNode": resources,
            },
        },
    }
    return [training_runtime, train_job]
