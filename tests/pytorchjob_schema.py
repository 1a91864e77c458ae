"""Strict validation of a Kubeflow Training Operator v1 PyTorchJob manifest (a plain dict).

Schema source: the OpenAPI-generated models of the PyPI package ``kubeflow-training``
(module ``kubeflow.training``, models ``KubeflowOrgV1*``), whose pod template types are the
``kubernetes`` client's ``V1*`` models. The SDK's own ``ApiClient.deserialize`` ignores unknown
keys and coerces primitives (``"2"`` -> 2, 16 -> "16"), so this module walks the models'
``openapi_types`` / ``attribute_map`` itself and:

* rejects keys that are not in the model (every level: job, spec, replica specs, pod template,
  containers, resources, volumes, ...), and wrong JSON types (bool is not an int);
* rejects ``None``/missing for fields whose generated setter rejects ``None`` (the SDK's notion
  of "required": e.g. container ``name``, volume ``name``, volumeMount ``mountPath``,
  podSpec ``containers``, PyTorchJobSpec ``pytorchReplicaSpecs`` *and* ``runPolicy``; the CRD
  itself only requires ``pytorchReplicaSpecs`` -- always emit ``runPolicy``);
* checks resource quantities (int or a string matching the Kubernetes quantity grammar);
* checks a small table of enums that the generated models do NOT enforce (values taken from the
  CRD descriptions / Kubernetes API docs);
* applies the Training Operator's admission-webhook rules (pkg/webhooks/pytorch) and a few
  operator / pod-level consistency rules;
* finally round-trips through the SDK's public ``ApiClient().deserialize`` (with
  ``kubeflow.training.utils.utils.FakeResponse``, the SDK's own adapter for dicts).

``validate_pytorchjob(manifest)`` returns None or raises ValueError listing every problem,
one per line, each prefixed with the JSON path of the offending field.
"""

from __future__ import annotations

import functools
import re
import types
from typing import Any

from kubeflow.training import models as _models  # also re-exports kubernetes.client models
from kubeflow.training.api_client import ApiClient
from kubeflow.training.utils.utils import FakeResponse

_ROOT_TYPE = "KubeflowOrgV1PyTorchJob"

# Kubernetes resource.Quantity grammar (as in the CRD's `pattern` for quantities).
_QUANTITY_RE = re.compile(
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
    r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
# Fields typed 'str' / 'dict(str, str)' in the client that really are int-or-string quantities.
_QUANTITY_FIELDS = {
    ("V1ResourceRequirements", "limits"),
    ("V1ResourceRequirements", "requests"),
    ("V1VolumeResourceRequirements", "limits"),
    ("V1VolumeResourceRequirements", "requests"),
    ("V1EmptyDirVolumeSource", "size_limit"),
    ("V1PodSpec", "overhead"),
    ("KubeflowOrgV1SchedulingPolicy", "min_resources"),
}
# Enums not enforced by the generated models (they have no allowed_values).
_ENUMS: dict[tuple[str, str], set[str]] = {
    ("KubeflowOrgV1ReplicaSpec", "restart_policy"): {"Always", "OnFailure", "Never", "ExitCode"},
    ("KubeflowOrgV1RunPolicy", "clean_pod_policy"): {"All", "Running", "None"},
    ("KubeflowOrgV1ElasticPolicy", "rdzv_backend"): {"c10d", "etcd", "etcd-v2"},
    ("V1PodSpec", "restart_policy"): {"Always", "OnFailure", "Never"},
    ("V1PodSpec", "dns_policy"): {"ClusterFirst", "ClusterFirstWithHostNet", "Default", "None"},
    ("V1Container", "image_pull_policy"): {"Always", "IfNotPresent", "Never"},
    ("V1ContainerPort", "protocol"): {"TCP", "UDP", "SCTP"},
    ("V1Toleration", "operator"): {"Exists", "Equal"},
    ("V1Toleration", "effect"): {"", "NoSchedule", "PreferNoSchedule", "NoExecute"},
}
_EMPTYDIR_MEDIUM_RE = re.compile(r"^(|Memory|HugePages(-.+)?)$")
_DNS1035_RE = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_NPROC_RE = re.compile(r"^(auto|cpu|gpu|xpu|[1-9][0-9]*)$")
_LIST_RE = re.compile(r"^list\[(.*)\]$")
_DICT_RE = re.compile(r"^dict\(([^,]*), (.*)\)$")


def _key(path: str, key: str) -> str:
    return f"{path}.{key}" if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key) else f"{path}[{key!r}]"


@functools.cache
def _required(klass: type) -> frozenset[str]:
    """Attributes whose generated setter rejects None under client-side validation."""
    inst = klass.__new__(klass)
    inst.local_vars_configuration = types.SimpleNamespace(client_side_validation=True)
    req = set()
    for attr in klass.openapi_types:
        try:
            getattr(klass, attr).fset(inst, None)
        except ValueError:
            req.add(attr)
    return frozenset(req)


def _check_leaf(value: Any, typ: str, path: str, quantity: bool, errs: list[str]) -> None:
    if quantity:
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            errs.append(f"{path}: expected a quantity (int or string), got {type(value).__name__}")
        elif isinstance(value, str) and not _QUANTITY_RE.match(value):
            errs.append(f"{path}: {value!r} is not a valid Kubernetes quantity")
        return
    ok = {
        "str": lambda v: isinstance(v, str),
        "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "float": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
        "bool": lambda v: isinstance(v, bool),
        "datetime": lambda v: isinstance(v, str),
        "date": lambda v: isinstance(v, str),
        "object": lambda v: True,
    }.get(typ)
    if ok is None:
        errs.append(f"{path}: validator does not know type {typ!r}")
    elif not ok(value):
        errs.append(f"{path}: expected {typ}, got {type(value).__name__} {value!r}")


def _walk(value: Any, typ: str, path: str, errs: list[str], quantity: bool = False) -> None:
    if value is None:  # callers report nulls with their context
        return
    if m := _LIST_RE.match(typ):
        if not isinstance(value, list):
            errs.append(f"{path}: expected a list, got {type(value).__name__}")
            return
        for i, item in enumerate(value):
            if item is None:
                errs.append(f"{path}[{i}]: null list item")
                continue
            _walk(item, m.group(1), f"{path}[{i}]", errs, quantity)
        return
    if m := _DICT_RE.match(typ):
        if not isinstance(value, dict):
            errs.append(f"{path}: expected a mapping, got {type(value).__name__}")
            return
        for k, v in value.items():
            if not isinstance(k, str):
                errs.append(f"{path}: key {k!r} is not a string")
                continue
            if v is None:
                errs.append(f"{_key(path, k)}: null map value")
                continue
            _walk(v, m.group(2), _key(path, k), errs, quantity)
        return
    klass = getattr(_models, typ, None)
    if klass is None or not hasattr(klass, "openapi_types"):
        _check_leaf(value, typ, path, quantity, errs)
        return
    if not isinstance(value, dict):
        errs.append(f"{path}: expected an object ({typ}), got {type(value).__name__}")
        return
    json_to_attr = {j: a for a, j in klass.attribute_map.items()}
    for k in value:
        if k not in json_to_attr:
            errs.append(
                f"{_key(path, str(k))}: unknown field for {typ} "
                f"(allowed: {', '.join(sorted(json_to_attr))})"
            )
    for attr in sorted(_required(klass)):
        if value.get(klass.attribute_map[attr]) is None:
            errs.append(f"{_key(path, klass.attribute_map[attr])}: required field missing")
    for k, v in value.items():
        attr = json_to_attr.get(k)
        if attr is None:
            continue
        sub = _key(path, k)
        if v is None:  # required ones were reported above; others: omit instead of null
            if attr not in _required(klass):
                errs.append(f"{sub}: explicit null (omit the field instead)")
            continue
        _walk(v, klass.openapi_types[attr], sub, errs, (typ, attr) in _QUANTITY_FIELDS)
        allowed = _ENUMS.get((typ, attr))
        if allowed is not None and isinstance(v, str) and v not in allowed:
            errs.append(f"{sub}: {v!r} not one of {sorted(allowed)}")
        if (
            (typ, attr) == ("V1EmptyDirVolumeSource", "medium")
            and isinstance(v, str)
            and not _EMPTYDIR_MEDIUM_RE.match(v)
        ):
            errs.append(f"{sub}: {v!r} not one of '', 'Memory', 'HugePages[-<size>]'")


def _semantic(m: dict, errs: list[str]) -> None:
    """Training Operator webhook + controller rules, and pod-level consistency."""
    if m.get("apiVersion") != "kubeflow.org/v1":
        errs.append(f"apiVersion: must be 'kubeflow.org/v1', got {m.get('apiVersion')!r}")
    if m.get("kind") != "PyTorchJob":
        errs.append(f"kind: must be 'PyTorchJob', got {m.get('kind')!r}")
    meta = m.get("metadata") if isinstance(m.get("metadata"), dict) else {}
    name = meta.get("name")
    if not isinstance(name, str) or len(name) > 63 or not _DNS1035_RE.match(name):
        errs.append(f"metadata.name: {name!r} is not a DNS-1035 label (webhook rule)")
    for top in ("metadata", "spec"):
        if not isinstance(m.get(top), dict):
            errs.append(f"{top}: required")
    spec = m.get("spec") if isinstance(m.get("spec"), dict) else {}
    nproc = spec.get("nprocPerNode")
    if isinstance(nproc, str) and not _NPROC_RE.match(nproc):
        errs.append(f"spec.nprocPerNode: {nproc!r} not one of auto|cpu|gpu|xpu|<int>")
    ep = spec.get("elasticPolicy")
    if isinstance(ep, dict) and ep.get("nProcPerNode") is not None and nproc is not None:
        errs.append("spec.elasticPolicy.nProcPerNode: must not be used with spec.nprocPerNode")
    rspecs = spec.get("pytorchReplicaSpecs")
    if not isinstance(rspecs, dict):
        return
    if not rspecs:
        errs.append("spec.pytorchReplicaSpecs: must not be empty")
    if isinstance(ep, dict) and "Worker" not in rspecs:
        errs.append("spec.pytorchReplicaSpecs.Worker: required when elasticPolicy is set")
    for rtype, rs in rspecs.items():
        base = f"spec.pytorchReplicaSpecs.{rtype}"
        if rtype not in ("Master", "Worker"):
            errs.append(f"{base}: replica type must be Master or Worker")
        if not isinstance(rs, dict):
            continue
        if rtype == "Master" and rs.get("replicas") != 1:
            errs.append(f"{base}.replicas: must be 1 for Master")
        tmpl = rs.get("template") or {}
        pod = tmpl.get("spec") or {}
        containers = pod.get("containers") or []
        if not isinstance(containers, list) or not containers:
            errs.append(f"{base}.template.spec.containers: must be specified")
            continue
        if not any(isinstance(c, dict) and c.get("name") == "pytorch" for c in containers):
            errs.append(f"{base}.template.spec.containers: needs a container named 'pytorch'")
        vols = {v.get("name") for v in pod.get("volumes") or [] if isinstance(v, dict)}
        for i, c in enumerate(containers):
            if not isinstance(c, dict):
                continue
            cpath = f"{base}.template.spec.containers[{i}]"
            if not c.get("image"):
                errs.append(f"{cpath}.image: required (webhook rule)")
            for j, vm in enumerate(c.get("volumeMounts") or []):
                if isinstance(vm, dict) and vm.get("name") not in vols:
                    errs.append(
                        f"{cpath}.volumeMounts[{j}].name: {vm.get('name')!r} "
                        "is not a volume of this pod"
                    )


def validate_pytorchjob(manifest: dict) -> None:
    """Raise ValueError (one 'path: problem' per line) unless ``manifest`` is a valid PyTorchJob."""
    if not isinstance(manifest, dict):
        raise ValueError(f"<root>: expected a mapping, got {type(manifest).__name__}")
    errs: list[str] = []
    _walk(manifest, _ROOT_TYPE, "", errs)
    errs = [e[1:] if e.startswith(".") else e for e in errs]
    if not errs:  # semantic rules assume the structure (types) is already valid
        _semantic(manifest, errs)
    if not errs:  # the SDK itself must be able to build the typed object
        try:
            ApiClient().deserialize(FakeResponse(manifest), _ROOT_TYPE)
        except (ValueError, TypeError) as exc:
            errs.append(f"<sdk deserialize>: {exc}")
    if errs:
        raise ValueError("invalid PyTorchJob manifest:\n" + "\n".join(errs))
