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

INITS = ("random",)


@dataclass
class RunSpec:
    """Everything that defines a run; validated before any heavy import."""

    variant: str = "native"
    preset: str = "tiny"
    steps: int = 10
    local_batch_size: int = 1
    seq_len: int | None = None  # None: the preset's
    init: str = "random"
    corpus: str = "embedded"
    tokenizer: str | None = None  # None: offline Qwen3 tokenizer (or the checkpoint's)
    lr: float = 8e-4
    warmup_steps: int = 2
    seed: int = 0
    device: str = "auto"
    tensorboard: bool = False

    def validate(self) -> RunSpec:
        from .variants import check_variant, get_preset

        check_variant(self.variant)
        preset = get_preset(self.preset)
        for name in ("steps", "local_batch_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise ConfigError(f"{name} must be a positive integer, got {value!r}")
        if self.seq_len is None:
            self.seq_len = preset.seq_len
        if not isinstance(self.seq_len, int) or self.seq_len <= 0:
            raise ConfigError(f"seq_len must be a positive integer, got {self.seq_len!r}")
        if self.seq_len > preset.shape.max_seq_len:
            raise ConfigError(
                f"seq_len {self.seq_len} is beyond the model's context of "
                f"{preset.shape.max_seq_len} tokens (preset {preset.name!r}); "
                "use a shorter --seq-len"
            )
        if self.init not in INITS:
            raise ConfigError(f"unknown init {self.init!r}; choose one of {', '.join(INITS)}")
        if not self.lr > 0:
            raise ConfigError(f"lr must be positive, got {self.lr!r}")
        if self.warmup_steps < 0:
            raise ConfigError(f"warmup_steps must be >= 0, got {self.warmup_steps!r}")
        return self


@dataclass
class RunResult:
    out: Path
    spec: RunSpec
    metrics: list[dict[str, Any]] = field(default_factory=list)
    status: str = "completed"
    wall_s: float = 0.0

    @property
    def metrics_path(self) -> Path:
        return self.out / "metrics.jsonl"

    @property
    def losses(self) -> list[float]:
        return [m["loss"] for m in self.metrics]


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
            for message in ("DTensor random operators", "'set_vital' is deprecated"):
                warnings.filterwarnings("ignore", message=message)
            yield
    finally:
        root.setLevel(level)


def is_rank0() -> bool:
    return os.environ.get("RANK", "0") == "0"


def trainer_config(
    spec: RunSpec,
    out: Path,
    device_type: str,
    tokenizer_path: Path,
    dataset: tuple[str, str | None],
):
    """The ``Trainer.Config`` for ``spec``, shaped like torchtitan's qwen3 registry entries."""
    from torchtitan.components.checkpoint import CheckpointManager
    from torchtitan.components.loss import ChunkedLossWrapper, CrossEntropyLoss
    from torchtitan.components.metrics import MetricsProcessor
    from torchtitan.components.optimizer import LRSchedulersContainer, default_adamw
    from torchtitan.config import DebugConfig, ParallelismConfig, TrainingConfig
    from torchtitan.hf_datasets.text_datasets import HuggingFaceTextDataLoader
    from torchtitan.models.common.config_utils import decoder_vocab_size
    from torchtitan.trainer import Trainer

    from .variants import get_preset, model_spec

    preset = get_preset(spec.preset)
    attention = "flex" if device_type == "cuda" else "sdpa"
    mspec = model_spec(spec.variant, preset.shape, preset.name, attention=attention)
    dataset_name, dataset_path = dataset
    return Trainer.Config(
        model_spec=mspec,
        hf_assets_path=str(tokenizer_path),
        dump_folder=str(out),
        loss=ChunkedLossWrapper.Config(
            loss_fn=CrossEntropyLoss.Config(global_vocab_size=decoder_vocab_size(mspec)),
        ),
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
            local_batch_size=spec.local_batch_size, seq_len=spec.seq_len, steps=spec.steps
        ),
        parallelism=ParallelismConfig(),
        checkpoint=CheckpointManager.Config(enable=False),
        activation_checkpoint=None,
        debug=DebugConfig(seed=spec.seed),
    )


def run(
    variant: str = "native",
    *,
    preset: str = "tiny",
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
    ).validate()

    from .device import resolve_device

    device_type = resolve_device(spec.device)
    if device_type == "cpu":
        from .patches import apply_cpu_patches

        apply_cpu_patches()

    # Every input is checked before the run folder is made or a model is built.
    from .assets import resolve_tokenizer
    from .corpus import dataset_args

    tokenizer_path = resolve_tokenizer(spec.tokenizer)
    dataset = dataset_args(spec.corpus)

    rank0 = is_rank0()
    out = prepare_out_dir(out, overwrite) if rank0 else Path(out or "runs/_nonzero_rank")
    result = RunResult(out=out, spec=spec)
    manifest = out / "run.json"

    def write_manifest(status: str, **extra: Any) -> None:
        if rank0:
            info = {"status": status, "spec": asdict(spec), "device": device_type, **extra}
            manifest.write_text(json.dumps(info, indent=2))

    write_manifest("running")

    bar = None
    if progress and rank0:
        from tqdm.auto import tqdm

        bar = tqdm(total=spec.steps, desc=f"{spec.variant}/{spec.init}", unit="step")

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
            config = trainer_config(spec, out, device_type, tokenizer_path, dataset)
            trainer = config.build()
            if device_type == "cpu":
                from .patches import patch_cpu_device

                patch_cpu_device()  # modules torchtitan imported while building
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
                    raise TrainingError(
                        f"loss became NaN/inf at step {bad_step}; stopped there. "
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
            result.status, steps_completed=len(result.metrics), wall_s=round(result.wall_s, 3)
        )
    return result
