"""Training text, registered as torchtitan datasets.

Three sources, one mechanism (torchtitan's ``DATASETS`` registry, its documented way to
add a dataset):

- ``embedded`` (default): the docstrings of a fixed list of Python standard-library
  modules. English technical prose that every Python install already has, so nothing is
  downloaded. Written once to the cache as JSON lines (one document per module).
  ``embedded-pretrain`` is the same text without its first ``HELD_OUT`` documents: the
  local "published" checkpoints are pretrained on it, so a run on ``embedded`` starts on
  text the pretrained model has never seen.
- local files: a ``.txt`` file (one document), a ``.jsonl`` file (one document per line,
  field ``text``), or a folder of them.
- any dataset in torchtitan's own registry by name, e.g. ``c4`` (what AWS's trn2 runs
  train on), streamed from the Hugging Face hub.
- a prepared folder (``qwen3-trn data prepare``, prepared.py): any of the above, already
  tokenized, for shared storage and nodes without network.
"""

from __future__ import annotations

import importlib
import inspect
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..assets import cache_dir, cached_folder
from ..errors import AssetError
from ..files import MiB, parse_json, read_bytes, read_lines

EMBEDDED = "embedded"
EMBEDDED_PRETRAIN = "embedded-pretrain"
#: documents at the start of the embedded corpus that pretraining never sees (about
#: 40k tokens: the first ~150 steps of a 256-token, batch-1 run)
HELD_OUT = 4

#: Modules whose docstrings make the embedded corpus; order is the document order.
EMBEDDED_MODULES = (
    "argparse",
    "asyncio",
    "base64",
    "bisect",
    "calendar",
    "collections",
    "configparser",
    "contextlib",
    "copy",
    "csv",
    "dataclasses",
    "datetime",
    "decimal",
    "difflib",
    "email.message",
    "enum",
    "fractions",
    "ftplib",
    "functools",
    "gettext",
    "glob",
    "gzip",
    "heapq",
    "hmac",
    "html.parser",
    "http.client",
    "http.server",
    "imaplib",
    "inspect",
    "ipaddress",
    "json",
    "logging",
    "mailbox",
    "multiprocessing.pool",
    "netrc",
    "optparse",
    "os",
    "pathlib",
    "pdb",
    "pickle",
    "pprint",
    "queue",
    "random",
    "re",
    "sched",
    "secrets",
    "selectors",
    "shlex",
    "shutil",
    "smtplib",
    "socket",
    "socketserver",
    "statistics",
    "string",
    "subprocess",
    "tarfile",
    "tempfile",
    "textwrap",
    "threading",
    "timeit",
    "tokenize",
    "trace",
    "traceback",
    "turtle",
    "typing",
    "unittest.case",
    "urllib.parse",
    "urllib.request",
    "uuid",
    "wave",
    "weakref",
    "zipfile",
)

CORPUS_FORMAT = 2
#: one document (a JSON line) at most: a book is a few MiB
DOCUMENT_LIMIT = 256 * MiB


def _module_text(name: str) -> str:
    """A module's docstring followed by those of its public classes and functions."""
    try:
        module = importlib.import_module(name)
    except Exception:  # e.g. turtle without tkinter: skip, the corpus is still large
        return ""
    parts = [inspect.getdoc(module) or ""]
    for attr in sorted(getattr(module, "__all__", None) or dir(module)):
        if attr.startswith("_"):
            continue
        obj = getattr(module, attr, None)
        if getattr(obj, "__module__", None) != module.__name__:
            continue
        if inspect.isclass(obj) or inspect.isfunction(obj):
            doc = inspect.getdoc(obj)
            if doc:
                parts.append(f"{attr}\n\n{doc}")
            if inspect.isclass(obj):
                for meth_name, meth in sorted(vars(obj).items()):
                    if meth_name.startswith("_") or not inspect.isfunction(meth):
                        continue
                    doc = inspect.getdoc(meth)
                    if doc:
                        parts.append(f"{attr}.{meth_name}\n\n{doc}")
    return "\n\n".join(p for p in parts if p.strip())


def _write_embedded(folder: Path) -> None:
    lines = []
    for name in EMBEDDED_MODULES:
        text = _module_text(name)
        if text:
            lines.append(json.dumps({"source": name, "text": text}) + "\n")
    (folder / "pretrain.jsonl").write_text("".join(lines[HELD_OUT:]))
    (folder / "docs.jsonl").write_text("".join(lines))


def embedded_corpus_path(split: str = EMBEDDED) -> Path:
    """The embedded corpus as JSON lines, written to the cache on first use (~1 s)."""
    version = f"{sys.version_info.major}{sys.version_info.minor}"
    folder = cached_folder(
        cache_dir() / f"corpus-stdlib-py{version}-v{CORPUS_FORMAT}",
        _write_embedded,
        marker="docs.jsonl",
    )
    return folder / ("pretrain.jsonl" if split == EMBEDDED_PRETRAIN else "docs.jsonl")


def is_local(corpus: str | Path) -> bool:
    """The embedded corpus or a file/folder on disk; anything else names a hub dataset."""
    return str(corpus) in (EMBEDDED, EMBEDDED_PRETRAIN) or Path(corpus).expanduser().exists()


def _files_in(path: Path) -> list[Path]:
    files = (
        sorted(p for p in path.rglob("*") if p.suffix in (".txt", ".jsonl"))
        if (path.is_dir())
        else [path]
    )
    for file in files:  # a FIFO or a device would block the read forever
        if not file.is_file():
            raise AssetError(
                f"corpus entry {file} is not a regular file (a pipe, socket or device); "
                "remove it or point --corpus at plain .txt/.jsonl files"
            )
    return files


def read_documents(path: str | Path) -> list[str]:
    """Documents from a .txt/.jsonl file or a folder of them; clear errors otherwise."""
    path = Path(path).expanduser()
    if not path.exists():
        raise AssetError(
            f"corpus {path} does not exist; pass a .txt or .jsonl file or a folder of "
            f"them, or use the built-in corpus ('{EMBEDDED}')"
        )
    docs: list[str] = []
    one_per_line = 'one document per line, like {"text": "..."}'
    for file in _files_in(path):
        if file.suffix == ".txt":  # (no size cap: a corpus has no natural size)
            docs.append(read_bytes(file, limit=None, fix="").decode("utf-8", "replace"))
        elif file.suffix == ".jsonl":
            for lineno, raw in read_lines(file, fix=one_per_line, line_limit=DOCUMENT_LIMIT):
                where = f"{file}:{lineno}"
                if raw is None:
                    limit = f"{DOCUMENT_LIMIT >> 20} MiB"
                    raise AssetError(f"{where} is longer than {limit}; {one_per_line}")
                if not raw.strip():
                    continue
                try:
                    text = parse_json(raw.decode("utf-8", "replace"), where, one_per_line)["text"]
                except (KeyError, TypeError) as e:
                    raise AssetError(
                        f"{where} is not a JSON object with a 'text' field "
                        f"({e.__class__.__name__}); {one_per_line}"
                    ) from None
                if not isinstance(text, str):
                    raise AssetError(
                        f"{where}: 'text' is a {type(text).__name__}, not a string; {one_per_line}"
                    )
                docs.append(text)
        else:
            raise AssetError(f"corpus file {file} must end in .txt or .jsonl")
    docs = [d for d in docs if d.strip()]
    if not docs:
        raise AssetError(f"corpus {path} holds no text; add .txt or .jsonl files with content")
    return docs


def _load_documents(path: str):
    from datasets import Dataset

    return Dataset.from_dict({"text": read_documents(path)})


def register_datasets() -> None:
    """Add our sources to torchtitan's dataset registry (idempotent)."""
    from torchtitan.hf_datasets import DatasetConfig
    from torchtitan.hf_datasets.text_datasets import DATASETS

    from .prepared import DATASET_NAME, load_prepared

    DATASETS.setdefault(
        "qwen3_trn_text",
        DatasetConfig(path="", loader=_load_documents, sample_processor=lambda s: s["text"]),
    )
    # a prepared folder: its rows are token ids (data/global_order.py reads them)
    DATASETS.setdefault(
        DATASET_NAME,
        DatasetConfig(path="", loader=load_prepared, sample_processor=lambda s: s["tokens"]),
    )


def dataset_args(corpus: str | Path, *, streams: bool | None = None) -> tuple[str, str | None]:
    """(torchtitan dataset name, dataset_path) for a ``--corpus`` value.

    ``streams``: the plan's decision (``Plan.corpus_streams``) that the corpus is a
    dataset by name; None decides here (a file or folder of that name is local). A
    preset's default (``c4``) is always the dataset, whatever lies in the working
    folder: a folder named c4 there had broken every trn2 preset.
    """
    from torchtitan.hf_datasets.text_datasets import DATASETS

    register_datasets()
    corpus = str(corpus)
    if corpus in (EMBEDDED, EMBEDDED_PRETRAIN):
        return "qwen3_trn_text", str(embedded_corpus_path(corpus))
    named = (not is_local(corpus)) if streams is None else streams
    if named and corpus in DATASETS:
        return corpus, None  # torchtitan's own entry (e.g. c4, streamed from the hub)
    from .prepared import DATASET_NAME, is_prepared

    if is_prepared(corpus):
        return DATASET_NAME, corpus
    read_documents(corpus)  # fail now, with a clear message, not inside the dataloader
    return "qwen3_trn_text", corpus


@dataclass(frozen=True)
class RunCorpus:
    """The corpus a run reads, as planning found it."""

    name: str
    streams: bool  # a hub dataset, streamed (else the embedded text or local files)
    #: a prepared folder's tokenizer, as its manifest records it (None: not a prepared
    #: folder: text, tokenized as the run reads it)
    tokenizer: dict[str, Any] | None = None


def check_corpus(
    corpus: str,
    *,
    named: bool,
    hashes: bool = False,
    record_in: str | Path | None = None,
    reread: bool = False,
) -> RunCorpus:
    """The corpus a run reads (``named``: by the user, not the preset's default),
    checked where it is a file or folder here: a text corpus that is missing or empty,
    or a damaged prepared folder (its shards' sizes; ``hashes``: their sha256 too, once
    per run folder ``record_in``, ``reread``: every one; data/verified.py), is one line
    now, not an error in the dataloader."""
    from .prepared import check_shards, is_prepared, read_manifest, refuse_incomplete

    embedded = corpus in (EMBEDDED, EMBEDDED_PRETRAIN)
    # the preset's default names a dataset (c4), never a file or folder where the user
    # stands: a folder named c4 there had broken plan, dry-run and the job files
    local = not embedded and named and is_local(corpus)
    prepared = named and is_prepared(corpus)
    tokenizer = None
    if prepared:  # (its tokenizer is checked once the run's is known: assets.run_tokenizer)
        folder = Path(corpus).expanduser()
        manifest = read_manifest(folder)
        check_shards(folder, manifest, hashes=hashes, record_in=record_in, reread=reread)
        tokenizer = manifest.get("tokenizer", {})
    elif local or (not embedded and named and ("/" in corpus or Path(corpus).suffix)):
        refuse_incomplete(corpus)
        read_documents(corpus)  # a clear error now (missing, empty), not in the dataloader
    return RunCorpus(corpus, streams=not (embedded or local), tokenizer=tokenizer)
