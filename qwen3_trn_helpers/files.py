"""Every file the package reads, read one way; every folder it writes, named one way.

A hostile-input probe (issue 50) found what a plain ``open`` + ``json.loads`` does with
files that are not what they should be: a FIFO in place of run.json made ``train
--resume auto`` wait forever, ``plan --model /dev/zero`` read until the kernel killed it,
a config.json nested 100,000 deep ended in Python's ``RecursionError``, and ``--out``
names the filesystem refuses ended in ``unexpected OSError``. So here:

- a file is opened without waiting (``O_NONBLOCK``) and looked at (``fstat``) before a
  byte is read: a named pipe, a device, a socket or a folder is refused by name;
- a file with a natural size (run.json, a config.json, a manifest) is refused above it,
  and read no further than it;
- text is UTF-8, JSON is JSON, and JSON nested deeper than :data:`MAX_DEPTH` is refused;
- a refusal is one :class:`UnreadableFile` line: which file, what is wrong, what to do.

Files that a library opens itself (tokenizer.json, safetensors) are checked with
:func:`check_regular` first. Standard library only: setup.sh runs
``python -m qwen3_trn_helpers.ops.wheelhouse`` before the package's dependencies exist.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .errors import AssetError, ConfigError

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30

#: JSON nested deeper than this is refused. The deepest file the package reads nests 5
#: levels (a wheelhouse manifest, a run.json's plan); Python's own reader gives up near
#: 1,000 with a RecursionError, tokenizers' (serde_json) at 128.
MAX_DEPTH = 64


class UnreadableFile(AssetError, ValueError):
    """A file the package reads is not what it should be: missing, not a regular file,
    too large, not UTF-8 text, not JSON, nested too deep, or JSON of another kind. A
    ValueError, as ``json``'s own errors are, so a reader that passes over a bad file
    (``except (OSError, ValueError)``) passes over these too.

    ``problem`` says what is wrong in words that follow the path ("is a named pipe
    (FIFO), not a regular file"), ``fix`` what to do; ``str()`` is the one line."""

    def __init__(self, path: str | Path, problem: str, fix: str, *, missing: bool = False):
        self.path, self.problem, self.fix, self.missing = Path(path), problem, fix, missing
        super().__init__(f"{path} {problem}" + (f"; {fix}" if fix else ""))


def _size(n: int) -> str:
    """'3.0 GiB', '16 MiB', '512 B': a size for a message."""
    for unit, scale in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if n >= scale:
            value = n / scale
            return f"{value:.0f} {unit}" if value == int(value) else f"{value:.1f} {unit}"
    return f"{n} B"


def _not_regular(mode: int) -> str | None:
    """What a non-regular file is, as words after its path (None: a regular file)."""
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "is a folder, not a file"
    kind = (
        "a named pipe (FIFO)" if stat.S_ISFIFO(mode)
        else "a character device" if stat.S_ISCHR(mode)
        else "a block device" if stat.S_ISBLK(mode)
        else "a socket" if stat.S_ISSOCK(mode)
        else "not a regular file"
    )  # fmt: skip
    return f"is {kind}, not a regular file (reading it could wait forever or never end)"


def _stat(path: Path, fix: str) -> os.stat_result:
    try:
        return os.stat(path)
    except FileNotFoundError:
        raise UnreadableFile(path, "does not exist", fix, missing=True) from None
    except (OSError, ValueError) as e:  # (ValueError: a NUL in the name)
        raise UnreadableFile(path, f"cannot be read ({_why(e)})", fix) from None


def _why(error: BaseException) -> str:
    return getattr(error, "strerror", None) or str(error)


def _checked(path: Path, st: os.stat_result, limit: int | None, fix: str) -> None:
    problem = _not_regular(st.st_mode)
    if problem:
        raise UnreadableFile(path, problem, fix)
    if limit is not None and st.st_size > limit:
        raise UnreadableFile(
            path, f"is {_size(st.st_size)}, larger than such a file ever is ({_size(limit)})", fix
        )


def check_regular(path: str | Path, *, limit: int | None, fix: str, empty: bool = True) -> int:
    """Refuse ``path`` unless it is a regular file of at most ``limit`` bytes (and, with
    ``empty=False``, not empty); its size. For files a library opens itself."""
    path = Path(path)
    st = _stat(path, fix)
    _checked(path, st, limit, fix)
    if not empty and st.st_size == 0:
        raise UnreadableFile(path, "is empty (cut short or never written)", fix)
    return st.st_size


def _open_regular(path: Path, limit: int | None, fix: str):
    """``path`` opened for reading, refused unless it is a regular file of at most
    ``limit`` bytes. Opened without waiting (a FIFO with no writer opens at once) and
    checked on the open file (``fstat``), so what is read is what was checked."""
    _checked(path, _stat(path, fix), limit, fix)  # (names a socket, which cannot be opened)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        missing = e.errno == errno.ENOENT
        problem = "does not exist" if missing else f"cannot be read ({_why(e)})"
        raise UnreadableFile(path, problem, fix, missing=missing) from None
    f = os.fdopen(fd, "rb")
    try:
        _checked(path, os.fstat(fd), limit, fix)  # (it may have been swapped meanwhile)
    except UnreadableFile:
        f.close()
        raise
    os.set_blocking(fd, True)
    return f


def read_bytes(path: str | Path, *, limit: int | None, fix: str) -> bytes:
    """The bytes of the regular file ``path``, at most ``limit`` of them (else refused)."""
    path = Path(path)
    with _open_regular(path, limit, fix) as f:
        try:
            data = f.read() if limit is None else f.read(limit + 1)
        except OSError as e:
            raise UnreadableFile(path, f"cannot be read ({_why(e)})", fix) from None
    if limit is not None and len(data) > limit:  # it grew since it was looked at
        raise UnreadableFile(path, f"is larger than such a file ever is ({_size(limit)})", fix)
    return data


def decode(data: bytes, path: str | Path, fix: str) -> str:
    """``data`` as UTF-8 text, or one line saying where it is not."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        problem = f"is not UTF-8 text (byte {e.start} is 0x{data[e.start]:02x}: binary or damaged)"
        raise UnreadableFile(path, problem, fix) from None


def read_text(path: str | Path, *, limit: int | None, fix: str) -> str:
    """The UTF-8 text of the regular file ``path`` (:func:`read_bytes`)."""
    return decode(read_bytes(path, limit=limit, fix=fix), path, fix)


def depth_of(value: Any) -> int:
    """How deeply ``value`` nests lists and objects (0 for a number), without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, level)
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, level + 1) for child in children)
    return deepest


def parse_json(text: str | bytes, where: str | Path, fix: str, *, depth: int = MAX_DEPTH) -> Any:
    """``text`` as JSON nested at most ``depth`` deep; ``where`` names it in a refusal
    (a file, or ``file:line`` for one line of a JSON-lines file)."""
    if isinstance(text, bytes):
        text = decode(text, where, fix)
    if not text.strip():
        raise UnreadableFile(where, "is empty (cut short or never written)", fix)
    try:
        value = json.loads(text)
    except RecursionError:
        value, deepest = None, None
    except json.JSONDecodeError as e:
        problem = f"is not valid JSON ({e.msg} at line {e.lineno} column {e.colno})"
        raise UnreadableFile(where, f"{problem}: cut short or overwritten", fix) from None
    else:
        deepest = depth_of(value)
    if deepest is None or deepest > depth:
        said = "hundreds of levels or more" if deepest is None else f"{deepest} levels"
        raise UnreadableFile(where, f"nests JSON deeper than the {depth} levels read ({said})", fix)
    return value


def read_json(
    path: str | Path, *, limit: int, fix: str, want: type | None = dict, depth: int = MAX_DEPTH
) -> Any:
    """The JSON in the regular file ``path`` (at most ``limit`` bytes, nested at most
    ``depth``), which must be a ``want`` (an object by default; None: any JSON)."""
    value = parse_json(read_bytes(path, limit=limit, fix=fix), path, fix, depth=depth)
    if want is not None and not isinstance(value, want):
        kind = {dict: "object", list: "list", str: "string"}.get(want, want.__name__)
        raise UnreadableFile(path, f"holds a JSON {_json_kind(value)}, not an {kind}", fix)
    return value


def _json_kind(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    return {dict: "object", list: "list", str: "string", int: "number", float: "number"}[
        type(value)
    ]


def check_folder(folder: str | Path, files: dict[str, tuple[int, bool]], fix: str) -> None:
    """Look first at the files a library will open in ``folder`` (tokenizers' and
    torchtitan's in a tokenizer folder): each of ``files`` that is there, by name ->
    (its largest size, whether it must be a JSON object), must be a regular non-empty
    file of at most that size, and a JSON object where asked; else one line naming it.
    (A FIFO tokenizer.json had made them wait forever; an empty tokenizer_config.json
    ended in ``unexpected JSONDecodeError``.)"""
    for name, (limit, json_object) in files.items():
        path = Path(folder) / name
        if os.path.lexists(path):
            check_regular(path, limit=limit, fix=fix, empty=False)
            if json_object:
                read_json(path, limit=limit, fix=fix)


def read_lines(
    path: str | Path, *, fix: str, line_limit: int
) -> Iterator[tuple[int, bytes | None]]:
    """(line number, bytes) of each line of the regular file ``path``; a line longer
    than ``line_limit`` bytes comes as None (it is not read into memory whole). For
    files without a natural size (metrics.jsonl, a corpus), each line has one."""
    path = Path(path)
    with _open_regular(path, None, fix) as f:
        lineno = 0
        while raw := f.readline(line_limit + 1):
            lineno += 1
            if len(raw) > line_limit and not raw.endswith(b"\n"):
                while (rest := f.readline(1 << 20)) and not rest.endswith(b"\n"):
                    pass  # the rest of an overlong line, in bounded pieces
                yield lineno, None
            else:
                yield lineno, raw


# --- folders the package writes ------------------------------------------------------------

#: a whole path's length (Linux's PATH_MAX) and one name's (NAME_MAX), where the
#: filesystem does not say
PATH_MAX, NAME_MAX = 4096, 255


def _lstat(path: Path) -> os.stat_result | None:
    """``path``'s stat (links followed), or None where there is nothing to stat (not
    there, a name too long, a file above it)."""
    try:
        return os.stat(path)
    except (OSError, ValueError):
        return None


def _name_max(existing: Path) -> int:
    try:
        return os.pathconf(existing, "PC_NAME_MAX")
    except (OSError, ValueError):
        return NAME_MAX


def check_folder_name(path: str | Path, flag: str) -> None:
    """Refuse, in one line naming ``flag`` (``--out``), a folder name no filesystem here
    takes: bytes that are not UTF-8 (every record the package writes names its folder
    as text: one ended in ``unexpected UnicodeEncodeError``), a NUL, a name or a path
    longer than Linux allows (``unexpected OSError: [Errno 36]``). Looks at no file."""
    text = os.fspath(path)
    try:
        encoded = text.encode("utf-8")
    except UnicodeEncodeError as e:
        shown = text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
        bad = text[e.start].encode("utf-8", "surrogateescape").hex()
        raise ConfigError(
            f"{flag} '{shown}' holds bytes that are not UTF-8 text (0x{bad}); what the "
            "package writes there names the folder as text: choose a name in UTF-8"
        ) from None
    if "\0" in text:
        raise ConfigError(f"{flag} {text!r} holds a NUL character; choose another name")
    _check_lengths(Path(text), encoded, flag, NAME_MAX)


def _check_lengths(path: Path, encoded: bytes, flag: str, name_max: int) -> None:
    for name in path.parts:
        if len(name.encode("utf-8")) > name_max:
            raise ConfigError(
                f"{flag} holds the name {name[:40]}... ({len(name.encode('utf-8'))} bytes), "
                f"longer than the {name_max} bytes a filesystem here takes for one name; "
                "choose a shorter name"
            )
    if len(encoded) >= PATH_MAX:
        raise ConfigError(
            f"{flag} is {len(encoded)} bytes long, longer than the {PATH_MAX - 1} a path "
            "may be; choose a shorter path"
        )


def check_output_folder(path: str | Path, flag: str) -> Path:
    """Refuse, in one line naming ``flag``, a folder to write that this machine's
    filesystem would refuse (:func:`check_folder_name`, with its own limit on a name)
    or that cannot be a folder: a file, a pipe or a device where it or a folder above
    it should be (``/dev/full/x`` ended in ``unexpected NotADirectoryError``), or a
    folder this user cannot write in. Returns it absolute; the caller makes it."""
    check_folder_name(path, flag)
    path = Path(path).expanduser().absolute()
    existing, found = path, _lstat(path)
    while found is None and existing != existing.parent:  # the nearest that exists
        existing = existing.parent
        found = _lstat(existing)
    is_folder = found is not None and stat.S_ISDIR(found.st_mode)
    limit = _name_max(existing if is_folder else existing.parent)
    _check_lengths(path, os.fsencode(path), flag, limit)
    if found is not None and not is_folder:
        problem = _not_regular(found.st_mode)
        kind = "a file" if problem is None else problem.split(",")[0].removeprefix("is ")
        where = f"{flag} {path}" if existing == path else f"{existing}, above {flag} {path},"
        raise ConfigError(f"{where} is {kind}, not a folder; choose another {flag}")
    if is_folder and not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigError(
            f"{flag} {path}: {existing} cannot be written by this user; choose a folder you "
            "can write to"
        )
    return path


def make_folder(path: Path, flag: str) -> Path:
    """Make the folder ``path`` (and those above it), or say in one line why not."""
    path = check_output_folder(path, flag)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(
            f"{flag} {path} cannot be made ({_why(e)}); choose a folder you can write to"
        ) from None
    return path


def lock_folder(folder: Path, lock_name: str, owner_name: str) -> tuple[Any, str | None]:
    """(the held lock, None), or (None, who holds it) when another process does, as its
    ``owner_name`` file says. The lock is the kernel's (``flock``, through filelock): it
    goes when its process does, however that ends. Makes ``folder`` (an OSError where it
    cannot); the run folder and ``data prepare``'s folder are held this way."""
    from filelock import FileLock, Timeout

    folder.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(folder / lock_name), timeout=0)
    try:
        lock.acquire()
    except Timeout:
        try:  # (a pipe or a device in its place: not read, files.py)
            owner = read_text(folder / owner_name, limit=4 * KiB, fix="").strip()
        except (OSError, ValueError):
            owner = ""
        return None, owner or "another process"
    return lock, None
