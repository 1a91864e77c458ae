"""``RunSpec``: the one list of run parameters, as the user gave them.

Every run parameter and its default is written once, below, with its help and the
checks that need no files. The command line (``qwen3-trn train --steps 10 ...``) is
generated from these fields (``cli.py``), the Python API takes them as keyword
arguments (``run(steps=10, ...)``), and a launch hands the same parameters to every
rank (``to_argv``). A spec is checked when it is made (an invalid one cannot exist) and
is never resolved against a machine here: defaults that depend on the machine (preset,
corpus, attention) stay ``None``/``"auto"`` and ``training/plan.py`` resolves them.

Cheap to import: no torch.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from ..device import DEVICE_TYPES
from ..errors import ConfigError, register_options
from ..files import check_folder_name
from ..model.presets import PRESETS
from ..model.variants import VARIANTS

ATTENTION = ("auto", "document", "causal", "flex")
MOE_IMPLS = ("blockwise", "grouped_mm")
PRECISIONS = ("bfloat16", "float32")
ACTIVATION_CHECKPOINTING = ("none", "selective", "full")
#: torchtitan 0.3.0's ``ParallelismConfig.spmd_backend`` values (a Literal there; its
#: default is "spmd_types"); a test compares this tuple with torchtitan's.
SPMD_BACKENDS = ("spmd_types", "full_dtensor", "partial_dtensor")
#: torchtitan 0.3.0's ``checkpoint.async_mode`` values (its CheckpointManager.Config)
CHECKPOINT_ASYNC = ("disabled", "async", "async_with_pinned_mem")
#: ``resume="auto"``: continue from the latest checkpoint in ``out`` if there is one
RESUME_AUTO = "auto"


def _param(default: Any, help: str, **cli: Any) -> Any:
    """A run parameter: its default and its help text (the CLI reads both)."""
    return field(default=default, metadata={"help": help, **cli})


@dataclass(frozen=True)
class RunSpec:
    """Everything that defines a training run, as the user gave it."""

    variant: str = _param(
        None,
        "which Qwen3 implementation (default: the one the preset implies: nki_moe for "
        "an MoE preset such as 30b-a3b, else native)",
        choices=tuple(VARIANTS),
    )
    preset: str | None = _param(
        None,
        "model size and layout (default: the variant's small preset; on trn2 with "
        "--nproc 64 its full-size preset)",
        choices=tuple(PRESETS),
    )
    steps: int = _param(10, "optimizer steps", positive=True)
    local_batch_size: int = _param(1, "sequences per rank per step", positive=True)
    global_batch_size: int | None = _param(
        None,
        "sequences per optimizer step over every data-parallel rank (torchtitan's "
        "training.global_batch_size): a multiple of local batch x data-parallel ranks, "
        "the rest gradient accumulation (default: one microbatch, no accumulation)",
        positive=True,
    )
    # The layout, when not the preset's (what `qwen3-trn plan` prints for a chosen one)
    tp: int | None = _param(
        None, "tensor parallel degree (default: the preset's layout)", positive=True
    )
    dp_replicate: int | None = _param(
        None,
        "HSDP replicas (torchtitan's data_parallel_replicate_degree; 1: FSDP over every "
        "rank, across nodes too). Default: one per node for a trn2 preset, else 1",
        positive=True,
    )
    activation_checkpoint: str | None = _param(
        None,
        "torchtitan activation checkpointing (default: the preset's)",
        choices=ACTIVATION_CHECKPOINTING,
    )
    seq_len: int | None = _param(None, "tokens per sequence (default: the preset's)", positive=True)
    init: str = _param(
        "random",
        "random | pretrained (the preset's published weights) | DIR (a Hugging Face Qwen3 "
        "folder, whose shape the model takes)",
    )
    corpus: str | None = _param(
        None,
        "embedded | a .txt/.jsonl file or folder | a torchtitan dataset such as c4 "
        "(default: the preset's: embedded for the small presets, c4 for trn2's)",
    )
    tokenizer: str | None = _param(
        None, "folder with tokenizer.json (default: the checkpoint's, else the offline Qwen3)"
    )
    lr: float | None = _param(
        None,
        "peak learning rate, AdamW with linear warm-up and decay (default: the preset's: "
        "8e-4 for the small presets, 3e-4 for trn2's, as AWS's recipe)",
        positive=True,
    )
    warmup_steps: int = _param(2, "learning-rate warmup steps", non_negative=True)
    seed: int = _param(0, "random seed (initialisation and data order)")
    device: str = _param(
        "auto", "where to train (auto: neuron, else cuda, else cpu)", choices=DEVICE_TYPES
    )
    nproc: int = _param(
        1,
        "ranks to launch through torchrun on each node (trn2: 64, one per logical NeuronCore)",
        positive=True,
    )
    nnodes: int = _param(
        1,
        "nodes (machines) in the job, each running this same command; the world is "
        "nnodes x nproc ranks (torchrun's --nnodes)",
        positive=True,
    )
    neuron_cores: str | None = _param(
        None,
        "trn2: the logical NeuronCores this run's ranks use on each node, FIRST-LAST (e.g. "
        "8-15: a class sharing one trn2, each student a slice); rank i takes core FIRST+i, "
        "so the slice holds --nproc cores (default: torch-neuronx gives rank i core i)",
    )
    rdzv_endpoint: str | None = _param(
        None,
        "HOST:PORT where the nodes meet (torchrun's c10d rendezvous), the same on every "
        "node: an address of one node that the others reach, never a loopback address",
    )
    rdzv_timeout: int = _param(
        600, "seconds to wait for every node to join the rendezvous", positive=True
    )
    attention: str = _param(
        "auto",
        "document: causal within each packed document; causal: plain causal, as AWS's "
        "trn2 recipe; flex: torchtitan's FlexAttention (CUDA). auto: causal on neuron, "
        "flex on cuda, document elsewhere",
        choices=ATTENTION,
    )
    moe_impl: str = _param(
        "blockwise",
        "nki_moe experts: blockwise (the NKI kernel's algorithm) or torchtitan's grouped_mm",
        choices=MOE_IMPLS,
    )
    mixed_precision: str = _param(
        "bfloat16",
        "dtype of the forward/backward (FSDP mixed precision); float32 for exact comparisons",
        choices=PRECISIONS,
    )
    spmd_backend: str = _param(
        "spmd_types",
        "torchtitan's parallelism.spmd_backend, set explicitly: spmd_types is torchtitan "
        "0.3.0's default and what its own Qwen3 configs pin; `qwen3-trn smoke` (rung "
        "spmd_backends) shows which work on this machine",
        choices=SPMD_BACKENDS,
    )
    compile: bool = _param(
        False,
        "torch.compile every transformer block and the loss (torchtitan's --compile.enable): "
        "inductor on CPU/CUDA, Neuron's 'neuron' backend on trn2; the first steps compile, "
        "later runs reuse the compile cache",
    )
    tensorboard: bool = _param(False, "also write torchtitan's TensorBoard events to OUT/tb")
    checkpoint_interval: int = _param(
        0, "save a torchtitan checkpoint every N steps (needed for --resume)", non_negative=True
    )
    checkpoint_async: str = _param(
        "disabled",
        "torchtitan's checkpoint.async_mode: async writes each checkpoint in a thread while "
        "training goes on, async_with_pinned_mem stages it in pinned memory first (CUDA); "
        "a save on a stop request and the last step's are always waited for",
        choices=CHECKPOINT_ASYNC,
    )
    keep_checkpoints: int = _param(
        10,
        "keep the newest N checkpoints, delete older ones (torchtitan's "
        "checkpoint.keep_latest_k; 0: keep all; at least 2, so a damaged newest one "
        "falls back to the one before)",
        non_negative=True,
    )
    resume: bool | str = _param(
        False,
        "continue the run in --out from its latest complete checkpoint; --resume auto: "
        "continue when --out holds one, else start fresh there (one command for the first "
        "run and every requeued or restarted one)",
        optional_value=RESUME_AUTO,
    )
    max_restarts: int = _param(
        0,
        "torchrun restarts this node's ranks up to N times after one fails (torchrun's "
        "--max-restarts); needs --resume auto, so the restarted ranks continue from the "
        "latest checkpoint",
        non_negative=True,
    )
    export_hf: bool = _param(
        False, "save the final weights as a Hugging Face folder (torchtitan's checkpointer)"
    )
    skip_memory_check: bool = _param(
        False,
        "train (or dry-run) even if the memory estimate exceeds this machine's free memory "
        "(on trn2: the share of a NeuronCore's HBM a plan may use)",
    )
    hang_timeout: int = _param(
        600,
        "seconds a training step may take: a longer one saves every rank's Python stack in "
        "OUT/ranks and stops the job, for Slurm or Kubernetes to requeue it (ranks torchrun "
        "starts; not a process's first two steps, which compile; 0: off)",
        non_negative=True,
    )
    watch_every: int = _param(
        100,
        "every N steps, one log line of each node's step time naming a straggler or a "
        "silent node (ranks torchrun starts; 0: never). Any time: qwen3-trn watch OUT",
        non_negative=True,
    )
    verify_data: bool = _param(
        False,
        "read every shard of a prepared --corpus for its sha256 again; otherwise a shard "
        "is hashed once per run folder, and again only when its file changes (size, "
        "times, inode)",
    )
    out: str | None = _param(None, "run folder (default: runs/<date-time>)")
    overwrite: bool = _param(False, "replace a previous run in --out (metrics and checkpoints)")

    def __post_init__(self) -> None:
        # A spec made without a variant takes the one its preset implies, here, where
        # every spec is made (CLI, Python API, run.json, a rank's argv), so they agree
        # and ``spec.variant`` is always a name once the spec exists.
        if self.variant is None:
            object.__setattr__(self, "variant", implied_variant(self.preset))
        self.validate()

    def replace(self, **changes: Any) -> RunSpec:
        return dataclasses.replace(self, **changes)

    def with_absolute_paths(self) -> RunSpec:
        """Every folder or file the user named, made absolute where they stand.

        Done once, where a spec enters (the CLI, ``run()``): launched ranks, torchtitan
        (whose checkpoint loader accepts absolute paths only) and run.json then all
        mean the same files, whatever their working directory.
        """
        from ..data.corpus import EMBEDDED, EMBEDDED_PRETRAIN

        def absolute(value: str | None) -> str | None:
            if not value or not str(value).strip():  # empty: validate() names it
                return value
            return str(Path(value).expanduser().absolute())

        changes: dict[str, Any] = {"out": absolute(self.out), "tokenizer": absolute(self.tokenizer)}
        if self.init not in ("random", "pretrained"):
            changes["init"] = absolute(self.init)
        corpus = self.corpus
        if (
            corpus
            and corpus not in (EMBEDDED, EMBEDDED_PRETRAIN)
            and (Path(corpus).expanduser().exists() or "/" in corpus or Path(corpus).suffix)
        ):
            changes["corpus"] = absolute(corpus)
        return self.replace(**changes)

    def validate(self) -> RunSpec:
        """Checks that need no imports and no files: fail fast, before anything loads.

        Run when a spec is made (``__post_init__``), so every RunSpec in the program is
        a valid one; the variant and preset names are checked as choices.
        """
        self.check_types()
        for f in fields(self):
            value = getattr(self, f.name)
            meta = f.metadata
            if value is None:
                continue
            if "choices" in meta and value not in meta["choices"]:
                choices = ", ".join(meta["choices"])
                if f.name in ("variant", "preset"):  # the words get_variant/get_preset use
                    raise ConfigError(f"unknown {f.name} {value!r}; choose one of {choices}")
                raise ConfigError(f"{f.name} must be one of {choices}, got {value!r}")
            if meta.get("positive") or meta.get("non_negative"):
                is_float = f.type.startswith("float")
                kind = int | float if is_float else int
                bad = isinstance(value, bool) or not isinstance(value, kind)
                if is_float:
                    if bad or not 0 < value < math.inf:
                        raise ConfigError(
                            f"{f.name} must be a positive finite number, got {value!r}"
                        )
                    continue
                least = 1 if meta.get("positive") else 0
                if bad or value < least:
                    what = "positive" if least else "non-negative"
                    raise ConfigError(f"{f.name} must be a {what} integer, got {value!r}")
        if (
            isinstance(self.seed, bool)
            or not isinstance(self.seed, int)
            or not (0 <= self.seed < 2**32)
        ):
            raise ConfigError(f"seed must be between 0 and 2**32 - 1, got {self.seed}")
        if self.out is not None and not str(self.out).strip():
            raise ConfigError(
                "out is empty; name the run folder (--out runs/mine), or leave it out for "
                "a new runs/<date-time> folder"
            )
        if self.out is not None:
            check_folder_name(self.out, "--out")  # (too long, not UTF-8: files.py)
        if not isinstance(self.init, str) or not self.init:
            raise ConfigError(
                f"init must be 'random', 'pretrained' or a checkpoint folder, got {self.init!r}"
            )
        if self.resume not in (False, True, RESUME_AUTO):
            raise ConfigError(
                f"resume must be True, False or 'auto' (--resume, --resume auto), got "
                f"{self.resume!r}"
            )
        if self.max_restarts and self.resume != RESUME_AUTO:
            raise ConfigError(
                f"max_restarts {self.max_restarts} restarts failed ranks, which must then "
                "continue from the latest checkpoint: pass --resume auto (and "
                "--checkpoint-interval N) too"
            )
        if self.resume and not self.checkpoint_interval:
            raise ConfigError(
                "resume needs checkpoints: pass the run's checkpoint_interval "
                "(--checkpoint-interval N) again"
            )
        if self.resume and self.out is None:
            raise ConfigError("resume needs --out: the folder of the run to continue")
        if self.resume and self.overwrite:
            raise ConfigError("resume continues the run in --out; overwrite would delete it")
        if self.keep_checkpoints == 1:
            raise ConfigError(
                "keep_checkpoints 1 would leave nothing to fall back to while the newest "
                "checkpoint is written (torchtitan needs 2 or more): pass --keep-checkpoints "
                "2 or more, or 0 to keep all"
            )
        if self.rdzv_endpoint is not None:
            split_endpoint(self.rdzv_endpoint)
        if self.neuron_cores is not None:
            self.core_slice()
        return self

    def check_types(self) -> None:
        """Each field holds its annotated type (the Python API takes any object: a
        ``run(out=123)`` would otherwise fail deep inside as a bare TypeError). Folders
        may be ``os.PathLike``; a bool is not an int here."""
        import os

        kinds = {"str": (str, os.PathLike), "int": (int,), "float": (int, float), "bool": (bool,)}
        for f in fields(self):
            value = getattr(self, f.name)
            names = [t.strip() for t in str(f.type).split("|")]
            if value is None and "None" in names:
                continue
            allowed = tuple(k for n in names if n in kinds for k in kinds[n])
            ok = isinstance(value, allowed) and ("bool" in names or not isinstance(value, bool))
            if not ok:
                wanted = " or ".join(n for n in names if n != "None")
                raise ConfigError(
                    f"{f.name} must be a {wanted}"
                    + (" (or None)" if "None" in names else "")
                    + f", got {type(value).__name__} {value!r}"
                )

    def core_slice(self) -> range | None:
        """The NeuronCores ``neuron_cores`` names on each node (planning checks that the
        slice holds one core per rank of the node)."""
        if self.neuron_cores is None:
            return None
        from ..trn2 import core_slice

        try:
            return core_slice(self.neuron_cores)
        except ValueError as e:
            raise ConfigError(f"neuron_cores: {e}") from None

    @property
    def world(self) -> int:
        """Ranks in the whole job: every node's ``nproc``."""
        return self.nnodes * self.nproc

    def to_argv(self, leave_out: tuple[str, ...] = ()) -> list[str]:
        """``qwen3-trn train`` flags that rebuild this spec (defaults and the fields in
        ``leave_out`` left out).

        The variant's default is the one the preset implies, so it is left out too.
        """
        argv = []
        for f in fields(self):
            if f.name in leave_out:
                continue
            value = getattr(self, f.name)
            default = implied_variant(self.preset) if f.name == "variant" else f.default
            if value == default:
                continue
            flag = "--" + f.name.replace("_", "-")
            argv += [flag] if value is True else [flag, str(value)]
        return argv


def _option_words() -> dict[str, tuple[str, bool, tuple[str, ...]]]:
    """Each RunSpec field as errors.py names it: its flag (as runs/arguments.py makes it),
    its argument, whether it stands alone (a bool; ``--resume`` without ``auto``), and
    the words it takes as values."""
    words = {}
    for f in fields(RunSpec):
        alone = f.type == "bool" or "optional_value" in f.metadata
        values = tuple(f.metadata.get("choices", ())) + tuple(
            [f.metadata["optional_value"]] if "optional_value" in f.metadata else []
        )
        words["--" + f.name.replace("_", "-")] = (f.name, alone, values)
    return words


register_options(_option_words())


def implied_variant(preset: str | None) -> str:
    """The variant a run without ``--variant`` uses: the only one its preset fits, else native.

    An MoE preset (30b-a3b, tiny_moe) fits only the MoE variant, so naming the preset
    is enough; a dense preset fits native and transformers_v5, and native is the
    default. An unknown preset name is left to :meth:`RunSpec.validate` to report.
    """
    if preset in PRESETS:
        moe = PRESETS[preset].shape.is_moe
        fitting = [v.name for v in VARIANTS.values() if v.moe == moe]
        if len(fitting) == 1:
            return fitting[0]
    return "native"


def split_endpoint(endpoint: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT`` too) as (host, port), or a ConfigError naming the form."""
    host, sep, port = endpoint.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(
            f"rdzv_endpoint must be HOST:PORT (for example 10.0.0.5:29500), got {endpoint!r}"
        )
    return host, int(port)
