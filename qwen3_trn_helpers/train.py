"""``run(...)``: one training run through torchtitan's own ``Trainer``, in-process.

What a notebook cell calls, and what the CLI calls on every rank under torchrun. We
build a ``Trainer.Config`` the way torchtitan's config registry does, add one metrics
logger, and call ``trainer.train()``; everything else (data loading, optimiser, LR
schedule, checkpointing, metrics) is torchtitan's.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .errors import ConfigError, RunFolderError, TrainingError

INITS = ("random", "pretrained")  # or a path to a Hugging Face Qwen3 folder


@dataclass
class RunSpec:
    """Everything that defines a run, as the user gave it."""

    variant: str = "native"
    preset: str | None = None  # None: the variant's default for this device, or --init's
    steps: int = 10
    local_batch_size: int = 1
    seq_len: int | None = None  # None: the preset's
    init: str = "random"  # "random", "pretrained", or a Hugging Face Qwen3 folder
    corpus: str = "embedded"
    tokenizer: str | None = None  # None: the checkpoint's, else the offline Qwen3 one
    lr: float = 8e-4
    warmup_steps: int = 2
    seed: int = 0
    device: str = "auto"
    tensorboard: bool = False
    checkpoint_interval: int = 0  # >0: save a torchtitan checkpoint every N steps
    # FSDP's parameter dtype in forward/backward: torchtitan's default bf16 (what trn2
    # runs), or float32 for exact comparisons such as the parity check.
    mixed_precision: str = "bfloat16"
    # nki_moe: "blockwise" (the NKI algorithm) or "grouped_mm" (torchtitan's own MoE
    # experts, for comparison)
    moe_impl: str = "blockwise"
    # Save the final weights as a Hugging Face folder (safetensors), via torchtitan's
    # checkpointer and the model's state-dict adapter: how the CPU "published"
    # checkpoint is made.
    export_hf: bool = False
    resume: bool = False  # continue from the latest checkpoint in the run folder

    def validate(self) -> RunSpec:
        """Checks that need no imports and no files: fail fast, before anything loads."""
        from .variants import PRESETS, check_variant

        check_variant(self.variant)
        if self.preset is not None and self.preset not in PRESETS:
            raise ConfigError(f"unknown preset {self.preset!r}; choose one of {', '.join(PRESETS)}")
        for name in ("steps", "local_batch_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ConfigError(f"{name} must be a positive integer, got {value!r}")
        if self.seq_len is not None and (
            isinstance(self.seq_len, bool) or not isinstance(self.seq_len, int) or self.seq_len <= 0
        ):
            raise ConfigError(f"seq_len must be a positive integer, got {self.seq_len!r}")
        if not isinstance(self.init, str) or not self.init:
            raise ConfigError(
                f"init must be 'random', 'pretrained' or a checkpoint folder, got {self.init!r}"
            )
        if not (isinstance(self.lr, int | float) and self.lr > 0):
            raise ConfigError(f"lr must be positive, got {self.lr!r}")
        if self.warmup_steps < 0:
            raise ConfigError(f"warmup_steps must be >= 0, got {self.warmup_steps!r}")
        if self.mixed_precision not in ("bfloat16", "float32"):
            raise ConfigError(
                f"mixed_precision must be 'bfloat16' or 'float32', got {self.mixed_precision!r}"
            )
        if self.moe_impl not in ("blockwise", "grouped_mm"):
            raise ConfigError(
                f"moe_impl must be 'blockwise' or 'grouped_mm', got {self.moe_impl!r}"
            )
        if self.checkpoint_interval < 0:
            raise ConfigError(f"checkpoint_interval must be >= 0, got {self.checkpoint_interval!r}")
        if self.resume and not self.checkpoint_interval:
            raise ConfigError(
                "resume needs checkpoints: pass the run's checkpoint_interval "
                "(--checkpoint-interval N) again"
            )
        return self


@dataclass
class Plan:
    """A spec resolved against this machine: device, shape, files. Nothing built yet."""

    spec: RunSpec
    device_type: str
    preset: Any  # variants.Preset, or None when the shape comes from an --init folder
    shape: Any  # variants.Qwen3Shape
    flavor: str
    init_dir: Path | None
    tokenizer_dir: Path
    dataset: tuple[str, str | None]
    hf_config_dir: Path | None
    moe_block_size: int


def _looks_like_path(init: str) -> bool:
    return init not in INITS


def plan_run(spec: RunSpec, progress: bool = False) -> Plan:
    """Resolve and check every input; raises a Qwen3TrnError naming the fix."""
    from .assets import resolve_tokenizer, tokenizer_vocab_size
    from .corpus import dataset_args
    from .device import resolve_device
    from .hf_checkpoint import check_hf_checkpoint
    from .variants import check_shape_for_variant, default_preset, get_preset

    spec.validate()
    device_type = resolve_device(spec.device)
    preset = None
    if spec.preset is not None:
        preset = get_preset(spec.preset)
    elif not _looks_like_path(spec.init):
        preset = get_preset(default_preset(spec.variant, device_type))

    init_dir = None
    if spec.init == "random":
        shape, source = preset.shape, f"preset {preset.name!r}"
    else:
        if spec.init == "pretrained":
            from .published import resolve_pretrained

            init_dir = resolve_pretrained(spec.variant, preset, device_type, progress)
        else:
            init_dir = Path(spec.init).expanduser()
        shape, source = check_hf_checkpoint(init_dir), f"checkpoint {init_dir}"
        if preset is not None:
            diffs = [d for d in preset.shape.differences(shape) if not d.startswith("max_")]
            if diffs:
                raise ConfigError(
                    f"checkpoint {init_dir} does not match preset {preset.name!r}: "
                    f"{'; '.join(diffs)}; drop --preset to train with the checkpoint's "
                    "own shape, or pick the matching checkpoint"
                )
    check_shape_for_variant(spec.variant, shape, source)

    seq_len = spec.seq_len or (preset.seq_len if preset else 256)
    if seq_len > shape.max_seq_len:
        raise ConfigError(
            f"seq_len {seq_len} is beyond the model's context of {shape.max_seq_len} "
            f"tokens ({source}); use a shorter --seq-len"
        )
    spec.seq_len = seq_len

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
    dataset = dataset_args(spec.corpus)

    hf_config_dir = None
    if spec.variant == "transformers_v5":
        if init_dir is not None:
            hf_config_dir = init_dir
        else:
            from .hf_checkpoint import cached_hf_config

            hf_config_dir = cached_hf_config(shape)

    block = preset.moe_block_size if preset and preset.moe_block_size else 0
    if spec.moe_impl == "grouped_mm":
        block = 0  # torchtitan's RoutedExperts instead of the blockwise ones
    elif shape.is_moe and not block:
        block = 256 if device_type == "neuron" else 64
    flavor = preset.name if preset else f"hf:{init_dir.name}"
    return Plan(
        spec=spec,
        device_type=device_type,
        preset=preset,
        shape=shape,
        flavor=flavor,
        init_dir=init_dir,
        tokenizer_dir=tokenizer_dir,
        dataset=dataset,
        hf_config_dir=hf_config_dir,
        moe_block_size=block,
    )


@dataclass
class RunResult:
    out: Path
    spec: RunSpec
    metrics: list[dict[str, Any]] = field(default_factory=list)
    status: str = "completed"
    wall_s: float = 0.0
    flavor: str = ""

    @property
    def metrics_path(self) -> Path:
        return self.out / "metrics.jsonl"

    @property
    def losses(self) -> list[float]:
        return [m["loss"] for m in self.metrics]


def latest_checkpoint_step(out: Path) -> int:
    """The newest step torchtitan saved under ``out/checkpoint`` (0 if none)."""
    steps = [
        int(p.name.split("-", 1)[1])
        for p in (Path(out) / "checkpoint").glob("step-*")
        if p.name.split("-", 1)[1].isdigit()
    ]
    return max(steps, default=0)


def prepare_resume_dir(out: str | Path | None) -> tuple[Path, int]:
    """Keep the metrics of every step up to the newest checkpoint; drop the rest.

    Steps after the checkpoint were trained by the interrupted run but will be trained
    again from the checkpoint, so their lines would otherwise appear twice.
    """
    if out is None:
        raise ConfigError("resume needs --out: the folder of the run to continue")
    out = Path(out)
    step = latest_checkpoint_step(out)
    if step == 0:
        raise RunFolderError(
            f"nothing to resume in {out}: it has no checkpoint/step-N folder; run with "
            "--checkpoint-interval N to save checkpoints"
        )
    metrics = out / "metrics.jsonl"
    if metrics.exists():
        from .metrics import read_metrics

        kept = [r for r in read_metrics(metrics) if r["step"] <= step]
        tmp = metrics.with_suffix(".tmp")
        tmp.write_text("".join(json.dumps(r) + "\n" for r in kept))
        tmp.replace(metrics)
    return out, step


def prepare_out_dir(out: str | Path | None, overwrite: bool = False) -> Path:
    """A folder for this run's files that holds no other run's metrics."""
    if out is None:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        base = Path("runs") / stamp
        out, n = base, 1
        while Path(out).exists():
            n += 1
            out = Path(f"{base}-{n}")
    out = Path(out)
    metrics = out / "metrics.jsonl"
    if metrics.exists():
        if not overwrite:
            raise RunFolderError(
                f"{out} already holds a run ({metrics}); pass a new --out folder, or "
                "--overwrite to replace it"
            )
        for name in ("metrics.jsonl", "run.json", "loss.png"):
            (out / name).unlink(missing_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def single_process_group():
    """Let torchtitan initialise a 1-rank process group, and tear it down afterwards.

    Under torchrun the launcher's environment is used as is. In a notebook we provide
    the rendezvous variables for one rank, and destroy the group after the run so that
    the next run in the same kernel starts clean.
    """
    import torch.distributed as dist

    launched = "RANK" in os.environ and "WORLD_SIZE" in os.environ
    saved = {}
    if not launched:
        env = {
            "RANK": "0",
            "LOCAL_RANK": "0",
            "WORLD_SIZE": "1",
            "LOCAL_WORLD_SIZE": "1",
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(_free_port()),
        }
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
    try:
        yield launched
    finally:
        if not launched:
            if dist.is_initialized():
                dist.destroy_process_group()
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


@contextmanager
def quiet_torchtitan(verbose: bool):
    """Hide torchtitan's INFO/WARNING log and known CPU-only noise unless ``verbose``.

    torchtitan logs through the root logger; on a CPU it warns about things that are
    expected there (no lspci, no peak-FLOPs table entry, no CUDA graphs).
    """
    if verbose:
        yield
        return
    import logging
    import warnings

    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            for message in (
                "DTensor random operators",
                "'set_vital' is deprecated",
                "In CPU autocast, but the target dtype is not supported",
            ):
                warnings.filterwarnings("ignore", message=message)
            yield
    finally:
        root.setLevel(level)


def is_rank0() -> bool:
    return os.environ.get("RANK", "0") == "0"


def tensor_parallel_degree(plan: Plan) -> int:
    """The preset's TP degree when launched at the preset's world size, else 1.

    FSDP (``data_parallel_shard_degree=-1``) takes whatever ranks TP leaves: 64 ranks at
    TP 4 give FSDP 16 for the 4B preset; a 2-rank CPU run is FSDP 2.
    """
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if plan.preset is not None and world == plan.preset.world_size:
        return plan.preset.layout.tp
    return 1


def activation_checkpoint_config(plan: Plan):
    """torchtitan's AC policy named by the preset (none for the tiny CPU presets)."""
    from torchtitan.distributed.activation_checkpoint import FullAC, SelectiveAC

    kind = plan.preset.activation_checkpoint if plan.preset is not None else "none"
    return {"none": None, "selective": SelectiveAC.Config(), "full": FullAC.Config()}[kind]


def trainer_config(plan: Plan, out: Path):
    """The ``Trainer.Config`` for a plan, shaped like torchtitan's registry entries."""
    from torchtitan.components.checkpoint import CheckpointManager
    from torchtitan.components.loss import ChunkedLossWrapper, CrossEntropyLoss
    from torchtitan.components.metrics import MetricsProcessor
    from torchtitan.components.optimizer import LRSchedulersContainer, default_adamw
    from torchtitan.config import CommConfig, DebugConfig, ParallelismConfig, TrainingConfig
    from torchtitan.hf_datasets.text_datasets import HuggingFaceTextDataLoader
    from torchtitan.models.common.config_utils import decoder_vocab_size
    from torchtitan.trainer import Trainer

    from .variants import model_spec

    spec = plan.spec
    attention = "flex" if plan.device_type == "cuda" else "sdpa"
    mspec = model_spec(spec.variant, plan.shape, plan.flavor, attention, plan.moe_block_size)
    dataset_name, dataset_path = plan.dataset
    saves = bool(spec.checkpoint_interval or spec.export_hf)
    checkpoint = CheckpointManager.Config(
        enable=bool(plan.init_dir or saves),
        load_only=not saves,
        interval=spec.checkpoint_interval or 10**9,
        initial_load_path=str(plan.init_dir) if plan.init_dir else None,
        initial_load_in_hf=plan.init_dir is not None,
        last_save_model_only=spec.export_hf,
        last_save_in_hf=spec.export_hf,
    )
    kwargs: dict[str, Any] = dict(
        model_spec=mspec,
        hf_assets_path=str(plan.tokenizer_dir),
        dump_folder=str(out),
        metrics=MetricsProcessor.Config(
            log_freq=1, enable_tensorboard=spec.tensorboard, disable_color_printing=True
        ),
        dataloader=HuggingFaceTextDataLoader.Config(
            dataset=dataset_name, dataset_path=dataset_path
        ),
        optimizer=default_adamw(lr=spec.lr),
        lr_scheduler=LRSchedulersContainer.Config(
            warmup_steps=min(spec.warmup_steps, spec.steps),
            decay_ratio=0.8,
            decay_type="linear",
            min_lr_factor=0.0,
        ),
        training=TrainingConfig(
            local_batch_size=spec.local_batch_size,
            seq_len=spec.seq_len,
            steps=spec.steps,
            mixed_precision_param=spec.mixed_precision,
        ),
        parallelism=ParallelismConfig(tensor_parallel_degree=tensor_parallel_degree(plan)),
        checkpoint=checkpoint,
        activation_checkpoint=activation_checkpoint_config(plan),
        comm=CommConfig(trace_buf_size=0),
        debug=DebugConfig(seed=spec.seed),
    )
    if spec.variant == "transformers_v5":
        from torchtitan.experiments.transformers_modeling_backend.configs import (
            TransformersBackendConfig,
        )

        # As torchtitan's own transformers-backend registry: plain cross-entropy, whose
        # vocabulary size the backend fills in from config.json.
        return TransformersBackendConfig(
            hf_model=str(plan.hf_config_dir), loss=CrossEntropyLoss.Config(), **kwargs
        )
    return Trainer.Config(
        loss=ChunkedLossWrapper.Config(
            loss_fn=CrossEntropyLoss.Config(global_vocab_size=decoder_vocab_size(mspec)),
        ),
        **kwargs,
    )


def run(
    variant: str = "native",
    *,
    preset: str | None = None,
    steps: int = 10,
    local_batch_size: int = 1,
    seq_len: int | None = None,
    init: str = "random",
    out: str | Path | None = None,
    overwrite: bool = False,
    corpus: str = "embedded",
    tokenizer: str | None = None,
    lr: float = 8e-4,
    seed: int = 0,
    device: str = "auto",
    tensorboard: bool = False,
    checkpoint_interval: int = 0,
    mixed_precision: str = "bfloat16",
    moe_impl: str = "blockwise",
    warmup_steps: int = 2,
    export_hf: bool = False,
    label: str | None = None,
    resume: bool = False,
    progress: bool = True,
    verbose: bool = False,
    on_step: Callable[[dict[str, Any]], None] | None = None,
) -> RunResult:
    """Train ``steps`` steps and return the per-step metrics.

    Writes ``out/metrics.jsonl`` (a line per completed step, flushed at once) and
    ``out/run.json`` (the spec and how the run ended). Raises a :class:`Qwen3TrnError`
    subclass for anything the user can fix; Ctrl-C stops after writing what finished.
    """
    spec = RunSpec(
        variant=variant,
        preset=preset,
        steps=steps,
        local_batch_size=local_batch_size,
        seq_len=seq_len,
        init=init,
        corpus=corpus,
        tokenizer=tokenizer,
        lr=lr,
        seed=seed,
        device=device,
        tensorboard=tensorboard,
        checkpoint_interval=checkpoint_interval,
        mixed_precision=mixed_precision,
        moe_impl=moe_impl,
        warmup_steps=warmup_steps,
        export_hf=export_hf,
        resume=resume,
    )
    # Every input is checked before the run folder is made or a model is built.
    plan = plan_run(spec, progress=progress)
    device_type = plan.device_type

    from .patches import apply_variant_patches

    apply_variant_patches(spec.variant, device_type)

    rank0 = is_rank0()
    resumed_from = 0
    if not rank0:
        out = Path(out or "runs/_nonzero_rank")
    elif spec.resume:
        out, resumed_from = prepare_resume_dir(out)
    else:
        out = prepare_out_dir(out, overwrite)
    result = RunResult(out=out, spec=spec, flavor=plan.flavor)
    manifest = out / "run.json"

    def write_manifest(status: str, **extra: Any) -> None:
        if rank0:
            info = {
                "status": status,
                "spec": asdict(spec),
                "device": device_type,
                "flavor": plan.flavor,
                "shape": asdict(plan.shape),
                "init_dir": str(plan.init_dir) if plan.init_dir else None,
                **extra,
            }
            manifest.write_text(json.dumps(info, indent=2))

    write_manifest("running")

    bar = None
    if progress and rank0:
        from tqdm.auto import tqdm

        desc = label or f"{spec.variant}/{Path(spec.init).name}"
        bar = tqdm(total=spec.steps, initial=resumed_from, desc=desc, unit="step")

    def step_done(record: dict[str, Any]) -> None:
        if bar is not None:
            bar.set_postfix(loss=f"{record['loss']:.3f}")
            bar.update(1)
        if on_step is not None:
            on_step(record)

    started = time.perf_counter()
    trainer = None
    jsonl = None
    try:
        with single_process_group(), quiet_torchtitan(verbose):
            config = trainer_config(plan, out)
            if device_type == "cpu":
                from .patches import patch_cpu_device

                patch_cpu_device()  # torchtitan modules imported while configuring
            from .patches import keep_transformers_init_global

            with keep_transformers_init_global():
                trainer = config.build()
            if device_type == "cpu" and int(os.environ.get("WORLD_SIZE", "1")) > 1:
                from .patches import force_sum_reduction_for_gloo

                force_sum_reduction_for_gloo(trainer.model_parts)
            if rank0:
                from torchtitan.components.metrics import LoggerContainer

                from .metrics import JsonlMetricsLogger

                jsonl = JsonlMetricsLogger(
                    out / "metrics.jsonl",
                    on_step=step_done,
                    # MFU needs the chip's peak FLOPs, which torchtitan knows for
                    # Trainium and GPUs; on a CPU it would divide by an A100's.
                    with_mfu=device_type in ("neuron", "cuda"),
                )
                container = LoggerContainer()
                container.add_logger(trainer.metrics_processor.logger)
                container.add_logger(jsonl)
                trainer.metrics_processor.logger = container
            try:
                trainer.train()
            except RuntimeError as e:
                if "Loss is not finite" in str(e):
                    bad_step = trainer.step
                    value = str(e).split("global_avg_loss=")[-1].split(")")[0]
                    raise TrainingError(
                        f"loss became {value} at step {bad_step}; stopped there. "
                        f"metrics.jsonl holds steps 1-{bad_step - 1}. Lower --lr or check "
                        "the corpus and checkpoint",
                        step=bad_step,
                    ) from None
                raise
            finally:
                trainer.close()
    except KeyboardInterrupt:
        result.status = "interrupted"
        raise
    except BaseException:
        result.status = "failed"
        raise
    finally:
        result.wall_s = time.perf_counter() - started
        if jsonl is not None:
            jsonl.close()
        if bar is not None:
            bar.close()
        if rank0 and (out / "metrics.jsonl").exists():
            from .metrics import read_metrics

            result.metrics = read_metrics(out / "metrics.jsonl")
        write_manifest(
            result.status,
            steps_completed=len(result.metrics),
            resumed_from_step=resumed_from,
            wall_s=round(result.wall_s, 3),
        )
    return result
