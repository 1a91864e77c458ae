"""A resume checked against the run it continues: the same training, or a change asked for.

A checkpoint of step N was trained with certain settings; continuing it with others
(another learning rate, seed, global batch, corpus, ...) makes a run that run.json
would then claim for all of its steps. :func:`check_resume` compares the resume's plan
with the settings the checkpoint recorded (training/checkpoint.py, beside its shards)
and, for a checkpoint from an older qwen3-trn that records none, with run.json's; a
setting neither records is refused, never skipped (run.json ``{"spec":{},"resolved":{}}``
had turned the check off). A difference is refused in one line, unless ``--allow-change``
asks for it; then run.json records each change (``resumes``). Steps, ranks, nodes and
checkpointing may change freely, but a longer ``--steps`` recomputes torchtitan's lr
schedule, which can send a decayed lr back to its peak: that gets a ``note:`` line and a
line in run.json too.

Cheap to import: torch loads only for the lr note.
"""

from __future__ import annotations

import re
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigError, RunFolderError
from ..files import UnreadableFile, read_json
from .metrics_file import RECORD_LIMIT
from .plan import Plan

#: settings a resumed run must share with the checkpointed one (they shape the model,
#: the data or the optimizer); steps, ranks, nodes, device and saving may change
RESUME_MUST_MATCH = (
    "variant", "preset", "seq len", "local batch", "attention", "corpus", "lr",
)  # fmt: skip
RESUME_SPEC_MUST_MATCH = (
    "init", "tokenizer", "warmup_steps", "seed", "moe_impl", "mixed_precision",
)  # fmt: skip
#: the sequences each optimizer step trains on, over every data-parallel rank
#: (:func:`global_batch`): the same ranks with another ``--global-batch-size``, or other
#: ranks with the default (one microbatch per rank), change it
GLOBAL_BATCH = "global batch"


@dataclass(frozen=True)
class ResumeRecord:
    """What a checked resume changed (allowed by ``--allow-change``) and noted."""

    from_step: int
    changes: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    #: the earlier resumes run.json recorded, this one last (run.json's ``resumes``)
    history: tuple[dict[str, Any], ...] = field(default=(), compare=False)

    def run_json(self) -> dict[str, Any]:
        """run.json's ``resumes`` entry for this run (nothing if it changed and noted
        nothing, and no earlier resume did)."""
        entries = list(self.history)
        if self.changes or self.notes:
            entry: dict[str, Any] = {"from_step": self.from_step}
            if self.changes:
                entry.update(changes=list(self.changes), allowed_by="--allow-change")
            if self.notes:
                entry["notes"] = list(self.notes)
            entries.append(entry)
        return {"resumes": entries} if entries else {}


def read_run_record(out: Path) -> tuple[dict[str, Any] | None, str]:
    """(run.json's content, "") when it records a run's settings, else (None, what is
    wrong with it): missing, unreadable, not JSON, or JSON of another shape."""
    path = out / "run.json"
    try:  # (a pipe, a device, a folder, bytes, JSON too deep: files.py names each)
        saved = read_json(path, limit=RECORD_LIMIT, fix="", want=None)
    except UnreadableFile as e:
        return None, f"{path} is missing" if e.missing else f"{path} {e.problem}"
    if not (
        isinstance(saved, dict)
        and isinstance(saved.get("resolved"), dict)
        and isinstance(saved.get("spec"), dict)
    ):
        return None, f"{path} records no run settings"
    return saved, ""


def global_batch(resolved: dict[str, Any], spec: dict[str, Any]) -> int | None:
    """Sequences per optimizer step, from a run's settings (run.json's or a
    checkpoint's): ``--global-batch-size``, else one microbatch on every data-parallel
    rank (local batch x ranks / TP); None where the settings do not tell."""
    if isinstance(spec.get("global_batch_size"), int):
        return spec["global_batch_size"]
    local, ranks = resolved.get("local batch"), resolved.get("ranks")
    if not isinstance(local, int) or not isinstance(ranks, int):
        return None
    tp = re.search(r"\bTP (\d+)", str(resolved.get("layout", "")))
    return local * ranks // (int(tp.group(1)) if tp else 1)


@dataclass(frozen=True)
class _Saved:
    """The checkpointed run's settings, and where they came from."""

    resolved: dict[str, Any]
    spec: dict[str, Any]
    source: str  # "" from the checkpoint or run.json; else why run.json was passed over
    run_json: dict[str, Any] | None


def saved_settings(out: Path, step: int) -> _Saved:
    """The settings to check a resume from ``step`` against: those the checkpoint
    recorded (training/checkpoint.py: what it was trained with), each one it lacks
    from run.json; a folder with neither is refused, so an unreadable run.json never
    turns the check off (a run trained at 256 tokens had resumed at 64 with run.json
    removed, and run.json then claimed 64 for all of it)."""
    from .checkpoint_files import SETTINGS_FILE, read_run_settings

    saved, problem = read_run_record(out)
    step_dir = out / "checkpoint" / f"step-{step}"
    recorded = read_run_settings(step_dir)
    if saved is None and recorded is None:
        fix = (
            "--overwrite to start afresh there"
            if (out / "run.json").is_file()
            else "a new --out to start afresh"
        )
        raise RunFolderError(
            f"{problem}, and the checkpoint {step_dir} records no settings "
            f"({SETTINGS_FILE}): this resume cannot be checked against the run's settings. "
            f"Put the run's run.json back, or start a new run ({fix})"
        )
    layers = [x for x in (saved, recorded) if x is not None]  # the checkpoint's win
    resolved = {k: v for x in layers for k, v in x["resolved"].items()}
    spec = {k: v for x in layers for k, v in x["spec"].items()}
    source = f"{problem}; the settings saved with the checkpoint at step {step}" if problem else ""
    missing = [k for k in RESUME_MUST_MATCH if k not in resolved]
    missing += [k for k in RESUME_SPEC_MUST_MATCH if k not in spec]
    if missing:
        where = f"{out / 'run.json'}" + (
            "" if recorded is None else f" and the checkpoint's {SETTINGS_FILE}"
        )
        raise RunFolderError(
            f"{where} record no {', '.join(missing)}: this resume cannot be checked against "
            f"the settings the checkpoint at step {step} was trained with. Put the run's "
            "run.json back, or start a new run (--overwrite, or a new --out)"
        )
    return _Saved(resolved, spec, source, saved)


def setting_changes(saved: _Saved, plan: Plan) -> list[str]:
    """Each setting of ``plan`` that changes the training from what was saved, as
    ``name old -> new``."""
    spec, now = plan.spec, plan.summary()
    changes = [
        f"{key} {saved.resolved[key]!r} -> {now[key]!r}"
        for key in RESUME_MUST_MATCH
        if saved.resolved[key] != now[key]
    ]
    changes += [
        f"{key} {saved.spec[key]!r} -> {getattr(spec, key)!r}"
        for key in RESUME_SPEC_MUST_MATCH
        if saved.spec[key] != getattr(spec, key)
    ]
    before, after = global_batch(saved.resolved, saved.spec), global_batch(now, asdict(spec))
    if before is not None and before != after:
        per_step = spec.local_batch_size * plan.world_size // plan.tp
        keep = (
            f", or --global-batch-size {before} to keep it"
            if spec.global_batch_size is None and before % per_step == 0
            else ""
        )
        changes.append(f"{GLOBAL_BATCH} {before} -> {after} sequences per step{keep}")
    return changes


def lr_schedule_note(saved: _Saved, plan: Plan, step: int) -> str | None:
    """A note when another ``--steps`` moves the lr the next step trains at: torchtitan
    recomputes its schedule over the new length, so a longer run sends a decayed lr back
    up (to its peak once the decay starts later than this step)."""
    from .lr_schedule import DECAY_RATIO, lr_factor

    before, after = saved.spec.get("steps"), plan.spec.steps
    warmup = saved.spec["warmup_steps"]
    if not isinstance(before, int) or before == after or not isinstance(warmup, int):
        return None
    was, now = lr_factor(step, before, warmup), lr_factor(step, after, plan.warmup_steps)
    if abs(now - was) <= 0.01 * max(was, now):
        return None
    peak = plan.lr
    where = "the peak again" if now == 1.0 and was < 1.0 else ("higher" if now > was else "lower")
    keep = f"; --steps {before} keeps the run's schedule" if step < before else ""
    return (
        f"--steps {after} (the checkpointed run's schedule had {before}) moves the lr "
        f"schedule: step {step + 1} trains at lr {now * peak:.3g} ({where}), where the "
        f"{before}-step schedule gave {was * peak:.3g} (torchtitan decays the lr over the "
        f"last {DECAY_RATIO:.0%} of --steps){keep}"
    )


def check_resume(
    out: Path, step: int, plan: Plan, share: tuple[int, int] | None = (0, 1)
) -> ResumeRecord:
    """Refuse a resume whose settings differ from the checkpointed run's (named), unless
    ``--allow-change``; a resume that would not train any further; a damaged checkpoint
    (``share``: this rank's part of the shard hashing, None for none); and a resume
    whose settings cannot be read (:func:`saved_settings`). Returns what changed and
    what was noted, for run.json."""
    from .checkpoint import check_checkpoint
    from .metrics_file import note_metrics_gap

    check_checkpoint(out / "checkpoint" / f"step-{step}", share)
    spec = plan.spec
    if spec.steps <= step:
        raise ConfigError(
            f"the checkpoint in {out} is at step {step}; pass --steps above it to train on"
        )
    speaks = share is None or share[0] == 0
    saved = saved_settings(out, step)
    changes = setting_changes(saved, plan)
    source = f" ({saved.source})" if saved.source else ""
    if changes and not spec.allow_change:
        raise ConfigError(
            f"--resume would continue the run in {out} with other settings than the "
            f"checkpoint of step {step} was trained with: {'; '.join(changes)}{source}. Pass "
            "the run's own settings again (only --steps, ranks, nodes and checkpointing may "
            "change), --allow-change to go on with these (run.json records the change), or "
            "start a new run elsewhere"
        )
    lr_note = lr_schedule_note(saved, plan, step)
    if speaks:
        said = []
        if saved.source and not changes:
            said.append(f"{saved.source} match this resume's; run.json is written anew")
        if changes:
            said.append(f"--allow-change: from step {step + 1}, {'; '.join(changes)}")
        if lr_note:
            said.append(lr_note)
        for line in said:
            print(f"note: {line}", file=sys.stderr, flush=True)
        note_metrics_gap(out / "metrics.jsonl", step)
    history = (saved.run_json or {}).get("resumes")
    earlier = tuple(e for e in history if isinstance(e, dict)) if isinstance(history, list) else ()
    return ResumeRecord(step, tuple(changes), (lr_note,) if lr_note else (), earlier)


def unrecorded_end(out: Path) -> str | None:
    """What to say when run.json says ``running`` while no process holds the folder
    (the caller holds it): the run that wrote it was killed before it could record how
    it ended (``kill -9``, the OOM killer, a node that went away); None otherwise."""
    saved, _ = read_run_record(out)
    if saved is None or saved.get("status") != "running":
        return None
    from .metrics_file import read_metrics

    try:
        steps = [r["step"] for r in read_metrics(out / "metrics.jsonl")]
    except (OSError, ValueError, KeyError):
        steps = []
    held = (
        f"metrics.jsonl holds steps {steps[0]}-{steps[-1]}"
        if len(steps) > 1
        else f"metrics.jsonl holds step {steps[0]}"
        if steps
        else "no step is in metrics.jsonl"
    )
    return (
        f"{out / 'run.json'} says `running`, but no process holds {out}: the run that wrote "
        f"it was killed before it could record its end (kill -9, the out-of-memory killer, "
        f"or its machine went away); {held}"
    )
