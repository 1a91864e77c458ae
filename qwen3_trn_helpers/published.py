"""Where "published weights" come from: the hub on trn2, a locally made checkpoint on CPU.

On trn2 the pretrained run starts from Qwen/Qwen3-4B-Instruct-2507 (or Qwen3-30B-A3B),
downloaded from the hub. A CPU in CI or on a laptop cannot download 8 GB, and the tiny
preset has no published weights anyway, so we make our own, honestly: pretrain the tiny
Qwen3 on the embedded corpus with the same torchtitan trainer, let torchtitan's
checkpointer export it in Hugging Face format (its state-dict adapter, safetensors), add
config.json and the tokenizer, and cache the folder. A pretrained run then loads it
through exactly the path a hub checkpoint takes (``--init`` -> ``initial_load_in_hf``).
The folder's ``qwen3_trn_recipe.json`` records how it was made.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from dataclasses import asdict
from pathlib import Path

from .errors import AssetError

#: How the local "published" checkpoints are pretrained. Changing it makes new ones.
RECIPE = {
    "corpus": "embedded",
    "steps": 80,
    "local_batch_size": 2,
    "seq_len": 256,
    "lr": 6e-3,
    "warmup_steps": 10,
    "seed": 1234,
    "format": 1,
}


def _family(variant: str) -> str:
    """Checkpoints are shared by variants with the same architecture."""
    return "moe" if variant == "nki_moe" else "dense"


def published_dir(variant: str, preset) -> Path:
    from .assets import cache_dir

    key = json.dumps({"shape": asdict(preset.shape), "recipe": RECIPE}, sort_keys=True)
    digest = hashlib.sha256(key.encode()).hexdigest()[:12]
    return cache_dir() / f"published-{preset.name}-{_family(variant)}-{digest}"


def make_local_published(variant: str, preset, progress: bool = True) -> Path:
    """Pretrain ``preset`` on the embedded corpus and export it as a HF Qwen3 folder."""
    from .assets import ensure_tokenizer
    from .hf_checkpoint import check_hf_checkpoint, hf_config
    from .train import run

    target = published_dir(variant, preset)
    pretrain_variant = "nki_moe" if _family(variant) == "moe" else "native"
    target.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".published-", dir=target.parent))
    try:
        result = run(
            pretrain_variant,
            preset=preset.name,
            init="random",
            out=work / "pretrain",
            corpus=RECIPE["corpus"],
            steps=RECIPE["steps"],
            local_batch_size=RECIPE["local_batch_size"],
            seq_len=RECIPE["seq_len"],
            lr=RECIPE["lr"],
            warmup_steps=RECIPE["warmup_steps"],
            seed=RECIPE["seed"],
            export_hf=True,
            label=f"pretraining the local '{preset.name}' checkpoint",
            progress=progress,
        )
        exported = work / "pretrain" / "checkpoint" / f"step-{RECIPE['steps']}"
        weights = sorted(exported.glob("*.safetensors"))
        if not weights:
            raise AssetError(f"torchtitan exported no safetensors into {exported}")
        folder = work / "hf"
        folder.mkdir()
        for file in weights + sorted(exported.glob("*.index.json")):
            shutil.copy2(file, folder / file.name)
        hf_config(preset.shape).save_pretrained(folder)
        tokenizer = ensure_tokenizer()
        for name in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy2(tokenizer / name, folder / name)
        recipe = {
            **RECIPE,
            "made_by": f"qwen3-trn pretraining of preset {preset.name!r} ({pretrain_variant})",
            "final_loss": result.losses[-1],
            "losses": result.losses,
        }
        (folder / "qwen3_trn_recipe.json").write_text(json.dumps(recipe, indent=2))
        check_hf_checkpoint(folder)  # what we cache must pass the checks users' folders do
        try:
            folder.rename(target)
        except OSError:  # another process finished first: keep theirs
            if not (target / "config.json").exists():
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return target


def ensure_local_published(variant: str, preset, progress: bool = True) -> Path:
    """The cached local "published" checkpoint, made on first use (a few minutes)."""
    target = published_dir(variant, preset)
    if (target / "config.json").exists() and (target / "qwen3_trn_recipe.json").exists():
        return target
    return make_local_published(variant, preset, progress)


def resolve_pretrained(variant: str, preset, device_type: str, progress: bool = True) -> Path:
    """A Hugging Face folder with the preset's published weights."""
    if preset.hub_id is not None:
        from .hub import download_checkpoint

        return download_checkpoint(preset.hub_id)
    return ensure_local_published(variant, preset, progress)
