"""Where "published weights" come from: the hub on trn2, a locally made checkpoint on CPU.

This module is also the one place the package downloads from the Hugging Face hub
(:func:`download_checkpoint`), and only when a run asks for real weights.

On trn2 the pretrained run starts from Qwen/Qwen3-4B-Instruct-2507 (or Qwen3-30B-A3B),
downloaded from the hub. A CPU in CI or on a laptop cannot download 8 GB, and the small
presets have no published weights anyway, so we make our own, honestly: pretrain the
small Qwen3 on the embedded corpus (without the documents a run on ``embedded`` starts
with, so it is scored on text it has not seen) with the same torchtitan trainer, let
torchtitan's checkpointer export it in Hugging Face format (its state-dict adapter,
safetensors), add config.json and the tokenizer, and cache the folder. A pretrained run
then loads it through exactly the path a hub checkpoint takes (``--init DIR`` ->
``initial_load_in_hf``). The folder's ``qwen3_trn_recipe.json`` records how it was made.

:func:`init_folder` turns a plan's published weights into that folder where a run uses
them (``run()``, before it trains here or launches ranks); :func:`with_init_weights`
puts it on the plan.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
from dataclasses import asdict
from pathlib import Path

from ..errors import AssetError
from ..model.presets import Preset
from ..training.plan import Plan, plan_run
from ..training.spec import RunSpec

#: How the local "published" checkpoints are pretrained. Changing it makes new ones.
RECIPE = {
    "corpus": "embedded-pretrain",
    "steps": 40,
    "local_batch_size": 2,
    "seq_len": 256,
    "lr": 8e-3,
    "warmup_steps": 5,
    "seed": 1234,
    "format": 2,
}


#: the disk a local checkpoint takes while it is made (tiny: the exported safetensors,
#: 81 MB, their copy, the tokenizer), for the message when the disk is full
MAKING_MB = 200

#: the libraries whose versions shape a locally made checkpoint (its init, its training
#: numerics, its export): another version of one of them makes a new checkpoint
SHAPED_BY = ("torch", "torchtitan", "transformers", "safetensors", "tokenizers")


def published_dir(preset: Preset) -> Path:
    """The cache folder of ``preset``'s local checkpoint: keyed by its shape, the
    recipe and the versions of the libraries that made it."""
    from ..assets import cache_dir
    from ..training.ranks import local_versions

    key = json.dumps(
        {"shape": asdict(preset.shape), "recipe": RECIPE, "versions": local_versions(SHAPED_BY)},
        sort_keys=True,
    )
    digest = hashlib.sha256(key.encode()).hexdigest()[:12]
    return cache_dir() / f"published-{preset.name}-{digest}"


def _pretrain_into(preset: Preset, folder: Path, progress: bool) -> None:
    from ..assets import ensure_tokenizer
    from ..model.hf_checkpoint import check_hf_checkpoint
    from ..model.variants import torchtitan_variant
    from .here import run_here
    from .reporter import Reporter

    # Variants of one architecture share a checkpoint; torchtitan's own model makes it.
    variant = torchtitan_variant(preset.shape).name
    work = folder / "pretrain"
    result = run_here(
        plan_run(
            RunSpec(
                variant=variant,
                preset=preset.name,
                init="random",
                corpus=RECIPE["corpus"],
                steps=RECIPE["steps"],
                local_batch_size=RECIPE["local_batch_size"],
                seq_len=RECIPE["seq_len"],
                lr=RECIPE["lr"],
                warmup_steps=RECIPE["warmup_steps"],
                seed=RECIPE["seed"],
                device="cpu",
                export_hf=True,
                out=str(work),
            )
        ),
        Reporter(progress=progress, label=f"pretraining the local '{preset.name}' checkpoint"),
    )
    exported = work / "checkpoint" / f"step-{RECIPE['steps']}"
    weights = sorted(exported.glob("*.safetensors"))
    if not weights:
        raise AssetError(f"torchtitan exported no safetensors into {exported}")
    for file in weights + sorted(exported.glob("*.index.json")):
        shutil.copy2(file, folder / file.name)
    preset.shape.hf_config().save_pretrained(folder)
    tokenizer = ensure_tokenizer()
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy2(tokenizer / name, folder / name)
    shutil.rmtree(work)
    check_hf_checkpoint(folder)  # what we cache must pass the checks users' folders do
    recipe = {
        **RECIPE,
        "made_by": f"qwen3-trn pretraining of preset {preset.name!r} ({variant})",
        "final_loss": result.losses[-1],
        "losses": result.losses,
    }
    (folder / "qwen3_trn_recipe.json").write_text(json.dumps(recipe, indent=2))
    _record_checksums(folder)


def _record_checksums(folder: Path) -> None:
    from ..assets import record_checksums

    names = sorted(p.name for p in folder.iterdir() if p.suffix in (".safetensors", ".json"))
    record_checksums(folder, tuple(n for n in names if n != "checksums.json"))


def pretrain_local(
    preset: Preset, folder: str, progress: bool = True, isolate: bool | None = None
) -> None:
    """Pretrain ``preset``'s local checkpoint into ``folder`` (on the CPU).

    On trn2 (a process that sees Neuron) this happens in a child process, like every
    trainer a notebook asks for (runs/child.py): the kernel never builds one.
    """
    from . import child

    if child.isolated(isolate):
        child.call(pretrain_local, preset, folder, progress=False, isolate=False)
        return
    _pretrain_into(preset, Path(folder), progress)


def ensure_local_published(preset: Preset, progress: bool = True) -> Path:
    """The cached local "published" checkpoint of ``preset``, made on first use."""
    from ..assets import CHECKSUMS, cached_folder, damaged_files
    from ..errors import disk_full
    from ..training.metrics_file import free_space

    def build() -> Path:
        try:
            return cached_folder(
                published_dir(preset),
                lambda folder: pretrain_local(preset, str(folder), progress),
                marker="qwen3_trn_recipe.json",
            )
        except Exception as e:
            if disk_full(e) is None:
                raise
            # (the trainer's own line would say --resume: this checkpoint is made anew)
            cache = published_dir(preset).parent
            raise AssetError(
                f"the disk is full where the local '{preset.name}' checkpoint is made "
                f"({cache}: {free_space(cache)} free; making it takes about {MAKING_MB} MB): "
                "free some space there (or set QWEN3_TRN_CACHE to a folder with room), then "
                "run the same command again; it is made anew, nothing half-made is kept"
            ) from None

    folder = build()
    if not (folder / CHECKSUMS).exists():  # made before checksums were recorded
        from ..model.hf_checkpoint import check_hf_checkpoint

        check_hf_checkpoint(folder)
        _record_checksums(folder)
    problem = damaged_files(str(folder), ((folder / CHECKSUMS).stat().st_mtime_ns, 0))
    if problem:
        print(f"note: the local checkpoint in {folder} is damaged ({problem}); remaking it",
              file=sys.stderr)  # fmt: skip
        shutil.rmtree(folder, ignore_errors=True)
        folder = build()
    return folder


def init_folder(plan: Plan, progress: bool = True) -> Path | None:
    """The folder a plan's first weights load from (None: random init).

    Published weights become a folder here, where a run uses them: downloaded from the
    hub once (the ranks a launch starts find them in the hub cache their launcher
    filled, without asking the hub again), or, for a small preset, pretrained here once
    and cached. A pretrained run thus trains exactly the preset a random one would:
    only the initial weights differ.
    """
    from ..training.ranks import launched_by_torchrun

    init = plan.init
    if not init.pending:
        return init.folder
    if init.hub_id is not None:
        return download_checkpoint(init.hub_id, cached_only=launched_by_torchrun())
    return ensure_local_published(plan.preset, progress)


def with_init_weights(plan: Plan, progress: bool = True) -> Plan:
    """``plan`` holding the folder its first weights load from (:func:`init_folder`),
    so the trainer needs nothing beside the plan."""
    return plan.with_init_folder(init_folder(plan, progress))


def download_checkpoint(repo_id: str, cached_only: bool = False) -> Path:
    """Download (or find in the HF cache) a model's config, weights and tokenizer.

    ``cached_only``: find it in the cache without asking the hub (a launched rank,
    whose launcher downloaded it: 64 ranks must not each query the hub).
    """
    from huggingface_hub import is_offline_mode, snapshot_download

    patterns = ["*.json", "*.safetensors", "tokenizer*", "*.txt"]
    offline = is_offline_mode() or cached_only
    try:
        return Path(snapshot_download(repo_id, allow_patterns=patterns, local_files_only=offline))
    except Exception as e:
        hint = (
            "HF_HUB_OFFLINE is set: unset it to download, or download once elsewhere and "
            "pass --init DIR"
            if offline
            else "check the network and `huggingface-cli login`, or pass --init DIR"
        )
        raise AssetError(
            f"could not get {repo_id} from the hub ({type(e).__name__}); {hint}"
        ) from None
