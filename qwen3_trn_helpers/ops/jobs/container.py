"""The container a Slurm job's steps run in: Pyxis (NVIDIA's SPANK plugin for enroot)
adds ``--container-image`` and ``--container-mounts`` to ``srun``.

The image is docker/Dockerfile's (qwen3-trn on AWS's Neuron training DLC): its Python
is ``CONTAINER_PYTHON``. The job's folders are mounted at the same paths inside, so the
script's paths mean the same on the host and in the container. Cheap to import.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Iterable

from ...errors import ConfigError

#: the Python of docker/Dockerfile's image (its venv over the DLC's torch)
CONTAINER_PYTHON = "/opt/qwen3-trn/venv/bin/python"


def _check_image(image: str) -> None:
    """Pyxis names an image as enroot does, ``[USER@][REGISTRY#]IMAGE[:TAG]`` or a
    squashfs file's path: a registry host before the first ``/`` (docker's form) would
    be read as a Docker Hub name."""
    if any(ord(c) < 32 or ord(c) == 127 for c in image):
        raise ConfigError(
            f"--container-image holds a control character ({image!r}); name the image "
            "without newlines or tabs"
        )
    if not image.strip() or image.startswith("-"):
        raise ConfigError(f"--container-image {image!r} is not an image name; e.g. "
                          "registry.example.com#team/qwen3-trn:0.2.0")  # fmt: skip
    if image.startswith("/") or "#" in image:
        return
    first = image.split("/", 1)[0]
    if "/" in image and ("." in first or ":" in first or first == "localhost"):
        rest = image.split("/", 1)[1]
        raise ConfigError(
            f"--container-image {image}: Pyxis (enroot) separates the registry with '#', "
            f"not '/'; pass {first}#{rest}"
        )


def pyxis_lines(image: str, mounts: Iterable[str], workdir: str) -> list[str]:
    """Script lines that run every later ``srun`` of the job in ``image``, with
    ``mounts`` (absolute host folders) at the same paths and ``workdir`` as its folder."""
    _check_image(image)
    folders: list[str] = []
    for path in (workdir, *mounts):
        path = os.path.normpath(path)
        if "," in path or ":" in path:  # Pyxis' separators in --container-mounts
            raise ConfigError(
                f"{path} holds ',' or ':', which --container-mounts cannot carry; rename "
                "it or move it to a folder without them"
            )
        if path not in folders:
            folders.append(path)
    flags = [
        f"--container-image={image}",
        "--container-mounts=" + ",".join(f"{p}:{p}" for p in folders),
        f"--container-workdir={os.path.normpath(workdir)}",
    ]
    return [
        "",
        "# every job step runs in the container (Pyxis); the job's folders are mounted at",
        "# the same paths, so each path below means the same on the host and inside",
        f'srun() {{ command srun {shlex.join(flags)} "$@"; }}',
    ]
