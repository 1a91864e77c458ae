"""Where a Kubernetes job's pods find their storage and which queue admits them.

- Storage: the pods mount a PersistentVolumeClaim (``--pvc``, by default ``fsx-claim``,
  the name AWS's FSx for Lustre samples give theirs) at ``/fsx``. A claim is namespaced:
  a pod mounts only a claim of its own namespace (Kubernetes docs, Persistent Volumes,
  "Claims As Volumes": "Claims must exist in the same namespace as the Pod using the
  claim"), and a pod whose claim is missing stays Pending. HyperPod's auto-resume puts
  the job in ``kubeflow`` (or a namespace prefixed ``hyperpod``), so a claim made in
  another namespace, as AWS's samples make theirs, is not found there: the command says
  in one line which claim the pods need, in which namespace.
- The corpus: a folder every pod reads, so on that volume; a corpus path elsewhere is
  refused (a pod would not find it, or each would read its own).
- The queue: ``--queue NAME`` puts the job in a Kueue LocalQueue, the label
  ``kueue.x-k8s.io/queue-name`` on the job (Kueue docs, "Run A TrainJob" and "Run A
  Kubeflow Job": the label in ``metadata.labels``; Kueue's webhook suspends the job
  until the queue admits all of it). Kueue then decides when the whole job starts, so
  the manifest names no Volcano gang scheduler (a cluster with Kueue need not run it).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from ...errors import ConfigError

#: the claim AWS's FSx for Lustre samples (aws-do-eks, awsome-distributed-training's
#: EKS examples) create and mount
DEFAULT_PVC = "fsx-claim"
#: Kueue's label naming a job's LocalQueue (kueue.x-k8s.io/queue-name)
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
#: a claim's name is a DNS-1123 subdomain: lower-case labels joined by '.', 253 at most
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
#: a label's value: 63 at most, letters, digits, '-', '_' and '.', alphanumeric at both ends
_LABEL_VALUE = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")


def check_pvc(name: str) -> str:
    """``name`` if Kubernetes takes it as a claim's name, else one line saying why."""
    if not (name.isascii() and len(name) <= 253 and _SUBDOMAIN.fullmatch(name)):
        raise ConfigError(
            f"--pvc {name!r} is not a claim name Kubernetes accepts: lower-case letters, "
            "digits, '-' and '.', a letter or digit at each end (for example fsx-claim)"
        )
    return name


def pvc_note(pvc: str, namespace: str | None, mount: str) -> str:
    """The one line that says which claim the pods mount, and where it must exist."""
    where = (
        f"namespace {namespace!r} (kubectl get pvc {pvc} -n {namespace})"
        if namespace
        else f"the namespace you apply this in (kubectl get pvc {pvc})"
    )
    return (
        f"note: the pods mount PersistentVolumeClaim {pvc!r} at {mount}; a claim is "
        f"namespaced: it must exist in {where}, or the pods stay Pending (--pvc NAME)"
    )


def queue_labels(queue: str | None) -> dict[str, str]:
    """The job's Kueue label, or none (checked as a label value)."""
    if queue is None:
        return {}
    if not (queue.isascii() and len(queue) <= 63 and _LABEL_VALUE.fullmatch(queue)):
        raise ConfigError(
            f"--queue {queue!r} is not a LocalQueue name Kubernetes takes as a label: at "
            "most 63 letters, digits, '-', '_' or '.', alphanumeric at both ends"
        )
    return {KUEUE_QUEUE_LABEL: queue}


def refuse_corpus_outside(corpus: str | None, mount: str, pvc: str) -> None:
    """A corpus folder or file every pod reads lies on the volume they all mount."""
    if not corpus or not corpus.startswith("/"):
        return  # a registered name (embedded, c4): not a path
    if not Path(os.path.normpath(corpus)).is_relative_to(mount):
        raise ConfigError(
            f"--corpus {corpus} is outside the volume every pod mounts at {mount} (claim "
            f"{pvc!r}): each pod would look for it on its own disk; prepare it there "
            f"(qwen3-trn data prepare --out {mount}/...) and pass that folder"
        )
