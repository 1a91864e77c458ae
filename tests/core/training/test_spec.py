"""RunSpec is the one parameter list: the CLI, the Python API and launches come from it."""

import ast
import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from qwen3_trn_helpers.cli import build_parser, spec_from_args
from qwen3_trn_helpers.errors import ConfigError
from qwen3_trn_helpers.training.plan import plan_run
from qwen3_trn_helpers.training.spec import RunSpec


def test_every_field_is_a_train_flag_with_its_default():
    args = build_parser().parse_args(["train"])
    assert spec_from_args(args) == RunSpec()  # the CLI's defaults are RunSpec's
    help_text = build_parser()._subparsers._group_actions[0].choices["train"].format_help()
    for f in dataclasses.fields(RunSpec):
        assert "--" + f.name.replace("_", "-") in help_text, f.name


def test_argv_round_trip():
    spec = RunSpec(variant="nki_moe", steps=3, lr=1e-3, seq_len=128, tensorboard=True,
                   out="runs/x", nproc=2, moe_impl="grouped_mm")  # fmt: skip
    argv = spec.to_argv()
    assert "--steps" in argv and "--local-batch-size" not in argv  # defaults left out
    # the CLI resolves the folder where the user stands (the one change it makes)
    parsed = spec_from_args(build_parser().parse_args(["train", *argv]))
    assert parsed == spec.replace(out=str(Path("runs/x").absolute()))


def test_a_preset_that_fits_one_variant_implies_it(tmp_path):
    """No --variant: an MoE preset takes nki_moe (CLI, Python API, run.json, argv agree)."""
    from qwen3_trn_helpers.runs.run import make_spec

    parse = build_parser().parse_args
    for command in (["train"], ["dry-run"]):
        args = parse([*command, "--preset", "30b-a3b"])
        assert spec_from_args(args).variant == "nki_moe", command
    assert make_spec(preset="30b-a3b").variant == "nki_moe"  # run(preset="30b-a3b")
    assert RunSpec(preset="tiny_moe").variant == "nki_moe"
    assert RunSpec(preset="4b").variant == RunSpec().variant == "native"  # dense: native
    spec = RunSpec(preset="30b-a3b", nproc=64, out=str(tmp_path))
    plan = plan_run(spec, device_type="neuron")
    assert (plan.variant.name, plan.preset.name) == ("nki_moe", "30b-a3b")
    assert RunSpec(**dataclasses.asdict(spec)) == spec  # run.json and isolated children
    assert "--variant" not in spec.to_argv()  # implied, like every default
    assert spec_from_args(parse(["train", *spec.to_argv()])) == spec  # a rank's argv
    with pytest.raises(ConfigError, match="variant 'native'"):  # a given variant is kept
        plan_run(RunSpec(variant="native", preset="30b-a3b", nproc=64, out=str(tmp_path)),
                 device_type="neuron")  # fmt: skip


def test_plan_is_pure(tmp_path):
    spec = RunSpec(steps=2, out=str(tmp_path / "never"))
    before = dataclasses.asdict(spec)
    plan = plan_run(spec)
    assert dataclasses.asdict(spec) == before and plan.spec is spec
    assert not (tmp_path / "never").exists()  # planning writes no run folder
    assert plan.seq_len == 256 and plan.preset.name == "tiny"


def test_pretrained_is_a_typed_init_turned_into_a_folder_where_it_is_used(tmp_path):
    plan = plan_run(RunSpec(init="pretrained", out=str(tmp_path)))
    assert plan.init.kind == "published" and plan.init.pending and plan.init_dir is None
    assert plan.init.hub_id is None  # the tiny preset's weights are made here, not the hub's
    assert not plan.needs_hub
    from qwen3_trn_helpers.training.trainer import trainer_config

    with pytest.raises(ConfigError, match="must be turned into a checkpoint folder"):
        trainer_config(plan, tmp_path)
    trn2 = plan_run(RunSpec(init="pretrained", nproc=64, out="x"), device_type="neuron")
    assert trn2.init.hub_id == "Qwen/Qwen3-4B-Instruct-2507" and trn2.needs_hub


def test_a_plan_holds_objects_not_names():
    """Nothing downstream looks a name up again: the plan carries the variant, preset,
    layout and init as objects."""
    from qwen3_trn_helpers.model.presets import Layout
    from qwen3_trn_helpers.model.variants import Variant

    plan = plan_run(RunSpec(variant="transformers_v5", nproc=64, out="x"), device_type="neuron")
    assert isinstance(plan.variant, Variant) and plan.variant.name == "transformers_v5"
    assert plan.layout == Layout(tp=4, fsdp=16, dp_replicate=1, ep=1)
    assert str(plan.layout) == "TP 4 x FSDP 16" and plan.layout.world == plan.world_size
    wider = plan.with_layout(tp=8)
    assert (wider.tp, wider.fsdp) == (8, 8) and wider.memory().total_gib < plan.memory().total_gib


@pytest.mark.parametrize(
    "degrees, message",
    [
        ({"tp": 16}, r"with_layout\(tp=16\): tp 16 must divide .* 8 key/value heads; use "
         r"tp=1, 2, 4, 8$"),
        ({"tp": 3}, "tp 3 must divide the 64 ranks"),
        ({"tp": 0}, r"with_layout\(tp=0\): tp must be a positive integer"),
        ({"dp_replicate": 3}, "dp_replicate 3 must divide the plan's 64 ranks"),
        ({"fsdp": 4}, "fsdp is not a degree it sets; pass tp or dp_replicate"),
    ],
)  # fmt: skip
def test_a_what_if_layout_no_run_could_train_is_refused(degrees, message):
    """Notebook 04's exercise 1: TP 16 on the 4B's 8 key/value heads is an error naming the
    call and the TPs that work, not memory numbers without a warning."""
    plan = plan_run(RunSpec(variant="native", nproc=64, out="x"), device_type="neuron")
    with pytest.raises(ConfigError, match=message):
        plan.with_layout(**degrees)


def test_a_spec_is_checked_when_it_is_made():
    with pytest.raises(ConfigError, match="unknown variant 'gpt2'"):
        RunSpec(variant="gpt2")
    with pytest.raises(ConfigError, match="steps must be a positive integer"):
        RunSpec().replace(steps=0)


def test_debug_accepted_after_the_subcommand():
    args = build_parser().parse_args(["train", "--steps", "1", "--debug"])
    assert args.debug is True
    args = build_parser().parse_args(["--debug", "train"])
    assert args.debug is True
    assert build_parser().parse_args(["train"]).debug is False


def test_help_and_argument_errors_import_nothing_outside_the_stdlib():
    """A typo or --help answers at once: no torch, transformers, numpy (nor anything else
    outside the standard library) is imported on the way to the error line or the help."""
    code = (
        "import sys\n"
        "from qwen3_trn_helpers.cli import main\n"
        "for argv in (['train', '--steps', 'x'], ['train', '--help']):\n"
        "    try: main(argv)\n"
        "    except SystemExit: pass\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} - set(sys.stdlib_module_names)))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    *help_lines, loaded = proc.stdout.splitlines()
    # (names with a leading underscore: the interpreter's and the editable install's hooks)
    assert [m for m in ast.literal_eval(loaded) if not m.startswith("_")] == ["qwen3_trn_helpers"]
    assert "expected a positive integer, got 'x'" in proc.stderr
    assert any("--steps" in line for line in help_lines)
