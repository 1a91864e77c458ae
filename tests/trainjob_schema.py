"""Strict validation of Kubeflow Trainer v2 objects (TrainJob, TrainingRuntime) as dicts.

Schema source: the pydantic models Kubeflow publishes from its CRDs, the PyPI package
``kubeflow-trainer-api`` (module ``kubeflow_trainer_api.models``, ``TrainerV1alpha1*``
with the Kubernetes ``IoK8s*`` and JobSet ``JobsetV1alpha2*`` types they embed). The
models type every field strictly (``StrictInt``, ``StrictStr``) but, as pydantic models,
ignore keys they do not know; this module walks each model's fields by their JSON names
(aliases) and refuses unknown keys at every level, then lets the model itself validate
types and required fields (``Model.model_validate``).

``validate_trainer_object(obj)`` returns None or raises ValueError listing every problem,
one per line, each prefixed with the JSON path of the offending field.
"""

from __future__ import annotations

import types
import typing
from typing import Any

from kubeflow_trainer_api import models
from pydantic import BaseModel, ValidationError

ROOTS = {
    "TrainJob": models.TrainerV1alpha1TrainJob,
    "TrainingRuntime": models.TrainerV1alpha1TrainingRuntime,
    "ClusterTrainingRuntime": models.TrainerV1alpha1ClusterTrainingRuntime,
}
API_VERSION = "trainer.kubeflow.org/v1alpha1"


def _models_in(annotation: Any) -> tuple[type[BaseModel] | None, str]:
    """(the pydantic model inside ``annotation``, "one" | "list" | "dict")."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            if arg is not type(None):
                return _models_in(arg)
    if origin in (list, typing.List):  # noqa: UP006
        inner, _ = _models_in(typing.get_args(annotation)[0])
        return inner, "list"
    if origin in (dict, typing.Dict):  # noqa: UP006
        inner, _ = _models_in(typing.get_args(annotation)[1])
        return inner, "dict"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, "one"
    return None, "one"


def _unknown_keys(model: type[BaseModel], value: Any, path: str) -> list[str]:
    if not isinstance(value, dict):
        return []  # the model reports the wrong type
    by_alias = {(f.alias or name): f for name, f in model.model_fields.items()}
    problems = []
    for key, item in value.items():
        field = by_alias.get(key)
        if field is None:
            problems.append(f"{path}.{key}: unknown field of {model.__name__}")
            continue
        inner, shape = _models_in(field.annotation)
        if inner is None or item is None or "actual_instance" in inner.model_fields:
            continue  # a value, or one of several types (a quantity: its model checks it)
        if shape == "list" and isinstance(item, list):
            for i, element in enumerate(item):
                problems += _unknown_keys(inner, element, f"{path}.{key}[{i}]")
        elif shape == "dict" and isinstance(item, dict):
            for k, element in item.items():
                problems += _unknown_keys(inner, element, f"{path}.{key}.{k}")
        elif shape == "one":
            problems += _unknown_keys(inner, item, f"{path}.{key}")
    return problems


def validate_trainer_object(obj: dict) -> None:
    kind = obj.get("kind")
    if kind not in ROOTS or obj.get("apiVersion") != API_VERSION:
        raise ValueError(f"not a Trainer v2 object: {obj.get('apiVersion')} {kind}")
    model = ROOTS[kind]
    problems = _unknown_keys(model, obj, kind)
    try:
        model.from_dict(obj)  # the package's own reader (it resolves the one-of types)
    except ValidationError as e:
        for error in e.errors():
            where = ".".join(str(p) for p in error["loc"])
            problems.append(f"{kind}.{where}: {error['msg']}")
    except ValueError as e:  # a one-of type (a quantity) matched none of its forms
        problems.append(f"{kind}: {str(e).splitlines()[0]}")
    if problems:
        raise ValueError("\n".join(problems))
