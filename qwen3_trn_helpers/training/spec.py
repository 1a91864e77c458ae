"""``RunSpec``: the one list of run parameters. ``plan_run``: a spec resolved for a machine.

Every run parameter and its default is written once, below. The command line
(``qwen3-trn train --steps 10 ...``) is generated from these fields (``cli.py``), the
Python API takes them as keyword arguments (``run(steps=10, ...)``), and a multi-rank
launch hands the same spec to every rank (``to_argv``). Defaults that depend on the
machine (preset, corpus, attention) are ``None``/``"auto"`` here and resolved by
:func:`plan_run`, which reads files but never trains, never writes a run folder and
never changes the spec it is given.

Cheap to import: no torch.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from ..device import DEVICE_TYPES
from ..errors import ConfigError
from ..model.presets import PRESETS, Layout, Preset, get_preset
from ..model.shapes import Qwen3Shape
from ..model.variants import VARIANTS, get_variant

ATTENTION = ("auto", "document", "causal", "flex")
MOE_IMPLS = ("blockwise", "grouped_mm")
PRECISIONS = ("bfloat16", "float32")
#: torchtitan 0.3.0's ``ParallelismConfig.spmd_backend`` values (a Literal there; its
#: default is "spmd_types"); a test compares this tuple with torchtitan's.
SPMD_BACKENDS = ("spmd_types", "full_dtensor", "partial_dtensor")
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
    tensorboard: bool = _param(False, "also write torchtitan's TensorBoard events to OUT/tb")
    checkpoint_interval: int = _param(
        0, "save a torchtitan checkpoint every N steps (needed for --resume)", non_negative=True
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
        False, "train even if the memory estimate exceeds this machine's free memory"
    )
    out: str | None = _param(None, "run folder (default: runs/<date-time>)")
    overwrite: bool = _param(False, "replace a previous run in --out (metrics and checkpoints)")

    def __post_init__(self) -> None:
        # A spec made without a variant takes the one its preset implies, here, where
        # every spec is made (CLI, Python API, run.json, a rank's argv), so they agree
        # and ``spec.variant`` is always a name once the spec exists.
        if self.variant is None:
            object.__setattr__(self, "variant", implied_variant(self.preset))

    def replace(self, **changes: Any) -> RunSpec:
        return dataclasses.replace(self, **changes)

    def with_absolute_paths(self) -> RunSpec:
        """Every folder or file the user named, made absolute where they stand.

        Done once, where a spec enters (the CLI, ``run()``): launched ranks, torchtitan
        (whose checkpoint loader accepts absolute paths only) and run.json then all
        mean the same files, whatever their working directory.
        """
        from ..corpus import EMBEDDED, EMBEDDED_PRETRAIN

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
        """Checks that need no imports and no files: fail fast, before anything loads."""
        get_variant(self.variant)
        if self.preset is not None:
            get_preset(self.preset)
        for f in fields(self):
            value = getattr(self, f.name)
            meta = f.metadata
            if value is None:
                continue
            if "choices" in meta and value not in meta["choices"]:
                choices = ", ".join(meta["choices"])
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
        if self.world > 1 and self.out is None:
            raise ConfigError(
                f"a {self.world}-rank run needs --out: every rank must write to one folder"
            )
        if self.rdzv_endpoint is not None:
            split_endpoint(self.rdzv_endpoint)
        if self.neuron_cores is not None:
            self.core_slice()
        return self

    def core_slice(self) -> range | None:
        """The NeuronCores of ``neuron_cores`` on each node, checked against ``nproc``."""
        if self.neuron_cores is None:
            return None
        from ..trn2 import core_slice

        try:
            cores = core_slice(self.neuron_cores)
        except ValueError as e:
            raise ConfigError(f"neuron_cores: {e}") from None
        if len(cores) != self.nproc:
            raise ConfigError(
                f"neuron_cores {self.neuron_cores} holds {len(cores)} cores but the run "
                f"starts {self.nproc} rank(s) per node, one core each: give "
                f"{cores.start}-{cores.start + self.nproc - 1} or --nproc {len(cores)}"
            )
        return cores

    @property
    def world(self) -> int:
        """Ranks in the whole job: every node's ``nproc``."""
        return self.nnodes * self.nproc

    def to_argv(self) -> list[str]:
        """``qwen3-trn train`` flags that rebuild this spec (defaults left out).

        The variant's default is the one the preset implies, so it is left out too.
        """
        argv = []
        for f in fields(self):
            value = getattr(self, f.name)
            default = implied_variant(self.preset) if f.name == "variant" else f.default
            if value == default:
                continue
            flag = "--" + f.name.replace("_", "-")
            argv += [flag] if value is True else [flag, str(value)]
        return argv

    def needs_hub(self, device_type: str) -> bool:
        """Does this run download from the Hugging Face hub (weights or text)?"""
        from ..corpus import is_local

        preset = self.resolve_preset(device_type, None)
        corpus = self.corpus or preset.corpus
        return not is_local(corpus) or (self.init == "pretrained" and preset.hub_id is not None)

    def resolve_preset(self, device_type: str, shape: Qwen3Shape | None) -> Preset:
        """The preset a run uses: the named one, else the variant's default here.

        On trn2 a run over the full-size preset's ranks (64: a whole trn2.48xlarge)
        takes that preset, the model AWS trained; fewer ranks, anywhere, the small preset
        that fits one core.
        An ``init`` folder of another shape keeps the default preset's layout, sequence
        length and checkpointing, and takes the folder's shape.
        """
        variant = get_variant(self.variant)
        if self.preset is not None:
            preset = get_preset(self.preset)
            if shape is not None and not shape.same_architecture(preset.shape):
                diffs = [d for d in preset.shape.differences(shape) if "max_seq_len" not in d]
                raise ConfigError(
                    f"checkpoint {self.init} does not match preset {preset.name!r}: "
                    f"{'; '.join(diffs)}; drop --preset to train with the checkpoint's own "
                    "shape, or pick the matching checkpoint"
                )
            return preset
        full = PRESETS[variant.trn2_preset]
        preset = variant.default_preset(
            full_size=device_type == "neuron" and self.nproc >= full.world_size
        )
        if shape is None or shape.same_architecture(preset.shape):
            return preset
        tp = preset.layout.tp
        if shape.n_heads % tp or shape.n_kv_heads % tp:
            tp = 1
        return dataclasses.replace(
            preset,
            name=f"{preset.name}, shape of {Path(self.init).name}",
            shape=shape,
            description=f"the shape of {self.init}",
            hub_id=None,
            layout=Layout(tp=tp),
            seq_len=min(preset.seq_len, shape.max_seq_len),
        )


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


def replicas_for(preset: Preset, nnodes: int) -> int:
    """Replicas of the model across nodes (HSDP), the trn2 rule for several nodes.

    A full-size preset's layout fills one trn2.48xlarge (TP inside a chip, FSDP over
    the node's 64 cores, on NeuronLink). Across nodes the link is EFA, several times
    slower, so each node keeps one whole sharded copy and the nodes only all-reduce
    gradients once a step: data_parallel_replicate = nnodes. Each rank then holds what
    it holds on one node. A small preset has no node-sized layout: its ranks shard one
    copy over the whole world (FSDP), exactly as the same ranks on one node would.
    """
    return nnodes if preset.full_size and nnodes > 1 else 1


def layout_reason(preset: Preset, nnodes: int) -> str:
    """One sentence: why this layout on this many nodes (the plan's "why")."""
    if replicas_for(preset, nnodes) == 1:
        if nnodes == 1:
            return "one node: the preset's own layout"
        return (
            f"{preset.name} has no per-node layout: FSDP over all ranks, as on one node "
            "with as many ranks"
        )
    why = (
        f"HSDP: {nnodes} replicas across nodes (gradients all-reduced over EFA once a "
        "step), the one-node layout inside each node (NeuronLink); each rank holds what "
        "it holds on one node"
    )
    if preset.shape.is_moe:
        why += (
            "; not expert parallelism: torchtitan 0.3.0's EP dispatches tokens with "
            "all-to-all in every MoE layer (over EFA, across nodes) and runs its own "
            "grouped experts, not the NKI blockwise kernel, and FSDP over one node "
            "already fits the 128 experts"
        )
    return why


@dataclass(frozen=True)
class Plan:
    """A spec resolved against a machine: device, preset, layout, files. Nothing built."""

    spec: RunSpec
    device_type: str
    world_size: int
    preset: Preset
    shape: Qwen3Shape
    seq_len: int
    tp: int
    dp_replicate: int  # HSDP replicas across nodes (1: plain FSDP)
    attention: str
    corpus: str
    lr: float
    moe_block_size: int
    init_dir: Path | None  # None: random init, or "pretrained" not resolved yet
    tokenizer_dir: Path | None  # None only in plans resolved for another machine

    @property
    def variant(self):
        return get_variant(self.spec.variant)

    @property
    def nnodes(self) -> int:
        return self.spec.nnodes

    @property
    def fsdp(self) -> int:
        return max(self.world_size // (self.tp * self.dp_replicate), 1)

    @property
    def layout(self) -> str:
        inner = Layout(tp=self.tp).describe(self.world_size // self.dp_replicate)
        return inner if self.dp_replicate == 1 else f"HSDP {self.dp_replicate} x ({inner})"

    @property
    def layout_reason(self) -> str:
        return layout_reason(self.preset, self.nnodes)

    @property
    def activation_checkpoint(self) -> str:
        return self.preset.activation_checkpoint

    @property
    def loss_chunks(self) -> int:
        return self.preset.loss_chunks

    @property
    def reduce_dtype(self) -> str:
        """The gradient reduce-scatter dtype: the preset's, fp32 when the run is fp32."""
        return self.preset.reduce_dtype if self.spec.mixed_precision == "bfloat16" else "float32"

    @property
    def flavor(self) -> str:
        return self.preset.name

    @property
    def pretrained_pending(self) -> bool:
        return self.spec.init == "pretrained"

    def memory(self, lnc: int | None = None):
        """Per-rank memory estimate of this plan (training/memory.py)."""
        from ..trn2 import Topology, lnc_from_env
        from .memory import estimate_memory

        topology = Topology(lnc or lnc_from_env())
        on_neuron = self.device_type == "neuron"
        return estimate_memory(
            self.shape,
            world=self.world_size // self.dp_replicate,  # each replica shards one copy
            tp=self.tp,
            seq_len=self.seq_len,
            local_batch=self.spec.local_batch_size,
            activation_checkpoint=self.activation_checkpoint,
            loss_chunks=self.loss_chunks,
            scores_materialised=on_neuron and self.attention == "document",
            moe_kernel_copies=on_neuron and self.moe_block_size > 0,
            moe_block_size=self.moe_block_size,
            reduce_bytes=2 if self.reduce_dtype == "bfloat16" else 4,
            runtime_gib=topology.runtime_reserved_gib if on_neuron else 0.0,
            hbm_gib=topology.hbm_gib_per_core,
        )

    def summary(self) -> dict[str, object]:
        """The resolved settings, as a table row (notebooks and run.json show it)."""
        return {
            "variant": self.spec.variant,
            "preset": self.preset.name,
            "device": self.device_type,
            "ranks": self.world_size,
            "nodes": self.nnodes,
            "layout": self.layout,
            "seq len": self.seq_len,
            "local batch": self.spec.local_batch_size,
            "activation checkpointing": self.activation_checkpoint,
            "attention": self.attention,
            "loss chunks": self.loss_chunks,
            "corpus": self.corpus,
            "init": self.spec.init,
            "steps": self.spec.steps,
            "lr": self.lr,
        }


def default_attention(device_type: str) -> str:
    """Plain causal on trn2 (AWS's choice), FlexAttention on CUDA, document-masked SDPA on CPU."""
    return {"neuron": "causal", "cuda": "flex"}.get(device_type, "document")


def on_trn2(spec: RunSpec) -> RunSpec:
    """``spec`` as a trn2.48xlarge runs it: the named preset (else the variant's
    full-size one) on that preset's ranks per node, unless ``nproc`` names them.

    The one statement of "which preset on how many ranks" for trn2 (reproduce, the dry
    run and the scaling lessons all ask it here).
    """
    preset = get_preset(spec.preset or get_variant(spec.variant).trn2_preset)
    return spec.replace(
        preset=preset.name, nproc=spec.nproc if spec.nproc > 1 else preset.world_size
    )


def plan_run(
    spec: RunSpec, *, device_type: str | None = None, shape: Qwen3Shape | None = None
) -> Plan:
    """Resolve and check every input; raises a Qwen3TrnError naming the fix.

    ``device_type`` resolves the plan for another machine: ``plan_run(spec,
    device_type="neuron")`` on a laptop shows what a trn2 would run (preset, layout,
    memory) without touching any device; its tokenizer is not resolved. ``shape``
    builds the preset's layout with another model shape (fewer layers for a quick dry
    run, other widths in a lesson); it is checked as a checkpoint's shape is.
    """
    from ..assets import resolve_tokenizer, tokenizer_vocab_size
    from ..corpus import EMBEDDED, EMBEDDED_PRETRAIN, is_local, read_documents
    from ..device import resolve_device
    from ..model.hf_checkpoint import check_hf_checkpoint

    spec.validate()
    here = device_type is None
    device = resolve_device(spec.device) if here else device_type
    variant = get_variant(spec.variant)

    init_dir = None
    folder_shape = None
    if spec.init not in ("random", "pretrained"):
        init_dir = Path(spec.init).expanduser().absolute()  # torchtitan loads absolute paths
        folder_shape = check_hf_checkpoint(init_dir)
    preset = spec.resolve_preset(device, folder_shape)
    if shape is not None:
        if folder_shape is not None:
            raise ConfigError(
                f"a run from checkpoint {init_dir} trains the checkpoint's shape; plan it "
                "without another shape"
            )
        preset = dataclasses.replace(preset, shape=shape)
    shape = folder_shape or preset.shape
    source = f"checkpoint {init_dir}" if init_dir else f"preset {preset.name!r}"
    variant.check_shape(shape, source)

    seq_len = spec.seq_len or preset.seq_len
    if seq_len > shape.max_seq_len:
        raise ConfigError(
            f"seq_len {seq_len} is beyond the model's context of {shape.max_seq_len} "
            f"tokens ({source}); use a shorter --seq-len"
        )
    world = spec.world
    replicas = replicas_for(preset, spec.nnodes)
    tp = preset.layout.tp if (world // replicas) % preset.layout.tp == 0 else 1
    if shape.n_heads % tp or shape.n_kv_heads % tp:
        raise ConfigError(
            f"tensor parallel degree {tp} must divide the {shape.n_heads} query and "
            f"{shape.n_kv_heads} key/value heads ({source})"
        )

    attention = default_attention(device) if spec.attention == "auto" else spec.attention
    if attention == "flex" and device != "cuda":
        raise ConfigError(
            f"attention 'flex' (FlexAttention) trains on CUDA only, not {device!r}; use "
            "--attention document or causal"
        )

    corpus = spec.corpus or preset.corpus
    embedded = corpus in (EMBEDDED, EMBEDDED_PRETRAIN)
    if not embedded and (is_local(corpus) or "/" in corpus or Path(corpus).suffix):
        read_documents(corpus)  # a clear error now (missing, empty), not in the dataloader

    tokenizer_dir = None
    if here:
        tok_source = spec.tokenizer
        if tok_source is None and init_dir is not None and (init_dir / "tokenizer.json").exists():
            tok_source = str(init_dir)
        tokenizer_dir = resolve_tokenizer(tok_source)
        n_tokens = tokenizer_vocab_size(tokenizer_dir)
        if n_tokens > shape.vocab_size:
            raise ConfigError(
                f"the tokenizer in {tokenizer_dir} has {n_tokens} tokens but the model's "
                f"embedding has {shape.vocab_size} rows ({source}); ids past "
                f"{shape.vocab_size - 1} would index out of range: use the model's own "
                "tokenizer or a model with a larger vocabulary"
            )

    moe_block = 0
    if shape.is_moe and spec.moe_impl == "blockwise":
        moe_block = preset.moe_block_size or (256 if device == "neuron" else 64)

    plan = Plan(
        spec=spec,
        device_type=device,
        world_size=world,
        preset=preset,
        shape=shape,
        seq_len=seq_len,
        tp=tp,
        dp_replicate=replicas,
        attention=attention,
        corpus=corpus,
        lr=spec.lr or preset.lr,
        moe_block_size=moe_block,
        init_dir=init_dir,
        tokenizer_dir=tokenizer_dir,
    )
    if spec.neuron_cores is not None and device != "neuron":
        raise ConfigError(
            f"neuron_cores {spec.neuron_cores} chooses NeuronCores on a trn2, but this run "
            f"trains on {device!r}; drop --neuron-cores (or run it on trn2)"
        )
    if device == "neuron":
        memory = plan.memory()
        if not memory.fits:
            raise ConfigError(
                f"preset {preset.name!r} on {world} rank(s) needs about "
                f"{memory.total_gib:.1f} GiB per NeuronCore, more than the "
                f"{memory.usable_gib:.1f} GiB a plan may use (90% of its "
                f"{memory.hbm_gib:.0f} GiB): launch it on {preset.world_size} ranks "
                f"(--nproc {preset.world_size}, as reproduce does), or train a smaller "
                "preset in this process"
                if preset.world_size > world // replicas
                else f"preset {preset.name!r} needs about {memory.total_gib:.1f} GiB per "
                f"NeuronCore, more than the {memory.usable_gib:.1f} GiB a plan may use "
                f"(90% of its {memory.hbm_gib:.0f} GiB): shorten --seq-len or use "
                "activation checkpointing"
            )
    return plan
