"""The Qwen3 family presets and the layout planner (``qwen3-trn plan``).

The fast tests plan on paper (memory model, cost model: no model is built but on the
meta device); the two slow ones dry-run the best layout with torchtitan's fake backend
and train two tiny candidates on this CPU.
"""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from qwen3_trn_helpers.cli import build_parser, main, spec_from_args
from qwen3_trn_helpers.errors import ConfigError
from qwen3_trn_helpers.model.family import FAMILY, find_model
from qwen3_trn_helpers.model.presets import PRESETS
from qwen3_trn_helpers.model.shapes import active_parameter_count, embedding_parameter_count
from qwen3_trn_helpers.planner.cost import RECOMPUTE, estimate_step, trn2_machine
from qwen3_trn_helpers.planner.search import EP_EXCLUDED, LOCAL_BATCHES, plan_layouts
from qwen3_trn_helpers.training.plan import plan_run
from qwen3_trn_helpers.training.spec import ACTIVATION_CHECKPOINTING, RunSpec


def _matches_card(count: int, printed: float) -> bool:
    """A count agrees with a model card's figure to the digits it prints (rounded or cut)."""
    digits = len(repr(printed).split(".")[1].rstrip("0")) if printed % 1 else 0
    return abs(count / 1e9 - printed) < 10**-digits


def test_family_parameter_counts_match_the_model_cards():
    misses = []
    for model in FAMILY.values():
        shape = PRESETS[model.preset].shape
        total = shape.parameter_count()  # torchtitan's Qwen3 of this shape, on meta
        non_embedding = total - embedding_parameter_count(shape)
        counts = [(total, model.total_b), (non_embedding, model.non_embedding_b)]
        if model.activated_b is not None:
            assert shape.is_moe
            counts.append((active_parameter_count(shape), model.activated_b))
        misses += [(model.name, n, card) for n, card in counts if not _matches_card(n, card)]
    assert not misses


def test_a_wrong_shape_misses_the_card():
    """The check can fail: one layer fewer is off by more than the printed digits."""
    shape = PRESETS["8b"].shape
    fewer = dataclasses.replace(shape, n_layers=shape.n_layers - 1)
    assert not _matches_card(fewer.parameter_count(), FAMILY["Qwen3-8B"].total_b)


def test_family_shapes_are_torchtitans_flavors():
    """Each family shape has the numbers of torchtitan 0.3.0's flavor of that name."""
    import torch
    from torchtitan.models.qwen3 import qwen3_configs

    for model in FAMILY.values():
        flavor = model.name.removeprefix("Qwen3-")
        with torch.device("meta"):
            theirs = qwen3_configs[flavor]("flex").build()
        ours = PRESETS[model.preset].shape
        assert sum(p.numel() for p in theirs.parameters()) == ours.parameter_count(), flavor
        assert len(theirs.layers) == ours.n_layers


def test_find_model_takes_published_and_preset_names():
    assert find_model("Qwen3-8B") == find_model("qwen3-8b") == find_model("8b") == "8b"
    assert find_model("Qwen/Qwen3-235B-A22B") == "235b-a22b"
    with pytest.raises(ConfigError, match="unknown model 'Qwen3-9B'; choose one of Qwen3-0.6B"):
        find_model("Qwen3-9B")


def test_each_dense_family_preset_fits_one_trn2():
    """Its starting layout passes the same memory check a trn2 run makes."""
    for name in ("1.7b", "8b", "14b", "32b"):
        plan = plan_run(RunSpec(preset=name, nproc=64, out="x"), device_type="neuron")
        assert plan.memory().fits and plan.world_size == 64


def test_runspec_layout_fields_reach_the_plan():
    spec = RunSpec(preset="8b", nproc=64, nnodes=4, out="x", tp=2, dp_replicate=2,
                   activation_checkpoint="full")  # fmt: skip
    plan = plan_run(spec, device_type="neuron")
    assert (plan.tp, plan.dp_replicate, plan.fsdp) == (2, 2, 64)
    assert plan.activation_checkpoint == "full"
    assert str(plan.layout) == "HSDP 2 x (TP 2 x FSDP 64)"
    with pytest.raises(ConfigError, match="dp_replicate 3 must divide the 256 ranks"):
        plan_run(spec.replace(dp_replicate=3), device_type="neuron")
    with pytest.raises(ConfigError, match="tensor parallel degree 3 must divide the 128 ranks"):
        plan_run(spec.replace(tp=3), device_type="neuron")


def test_a_layout_that_does_not_fit_is_never_proposed():
    """The planner proposes exactly the layouts a trn2 run's own memory check accepts."""
    result = plan_layouts("Qwen3-8B", 1)
    proposed = {(c.tp, c.activation_checkpoint, c.local_batch) for c in result.candidates}
    accepted = set()
    for tp in (1, 2, 4):
        for ac in ACTIVATION_CHECKPOINTING:
            for lb in LOCAL_BATCHES:
                spec = RunSpec(preset="8b", nproc=64, out="x", tp=tp, dp_replicate=1,
                               activation_checkpoint=ac, local_batch_size=lb)  # fmt: skip
                try:
                    plan_run(spec, device_type="neuron")
                except ConfigError as e:
                    assert "GiB per NeuronCore" in str(e)
                    continue
                accepted.add((tp, ac, lb))
    assert proposed == accepted
    assert 0 < result.rejected == result.considered - len(proposed)
    assert all(c.memory.total_gib <= 0.9 * c.memory.hbm_gib for c in result.candidates)
    rates = [c.tokens_per_s for c in result.candidates]
    assert rates == sorted(rates, reverse=True)


def test_the_printed_command_trains_the_best_layout():
    """The command's flags, parsed by the CLI, rebuild the best candidate's spec."""
    result = plan_layouts("Qwen3-8B", 4)
    command = result.command()
    assert command.startswith("qwen3-trn slurm ")  # several nodes: a batch script
    args = build_parser().parse_args(command.split()[1:])
    assert spec_from_args(args) == result.best.spec.with_absolute_paths()
    assert "runner-up" in result.runner_up_reason()


def test_the_cost_model_moves_with_its_constants():
    shape = PRESETS["30b-a3b"].shape
    trn2 = trn2_machine(2)
    common = dict(nnodes=2, tp=1, local_batch=1, seq_len=4096, reduce_bytes=2)
    hsdp = estimate_step(shape, trn2, dp_replicate=2, activation_checkpoint="full", **common)
    slower_efa = dataclasses.replace(trn2, inter_gb_s=trn2.inter_gb_s / 2)
    hsdp_slow = estimate_step(
        shape, slower_efa, dp_replicate=2, activation_checkpoint="full", **common
    )
    assert hsdp_slow.hsdp_s == pytest.approx(2 * hsdp.hsdp_s) and hsdp.hsdp_s > 0
    fsdp = estimate_step(shape, trn2, dp_replicate=1, activation_checkpoint="none", **common)
    assert fsdp.hsdp_s == 0 and fsdp.tp_s == 0
    assert hsdp.recompute_s == pytest.approx(hsdp.compute_s * RECOMPUTE["full"])
    tp = estimate_step(PRESETS["8b"].shape, trn2, dp_replicate=1, activation_checkpoint="none",
                       **{**common, "tp": 4})  # fmt: skip
    assert tp.tp_s > 0
    # every constant is shown with where it comes from
    assert all(row["source"] for row in trn2.constants())


def test_moe_plans_say_why_there_is_no_expert_parallelism():
    result = plan_layouts("Qwen3-30B-A3B", 1)
    assert EP_EXCLUDED in result.excluded and "BlockwiseRoutedExperts" in EP_EXCLUDED
    assert all(c.tp == 1 and c.to_json()["ep"] == 1 for c in result.candidates)
    assert EP_EXCLUDED not in plan_layouts("Qwen3-4B", 1).excluded


def test_235b_fits_no_node_count_and_the_planner_says_why():
    with pytest.raises(ConfigError, match="FSDP buffers .*does not shrink with more nodes"):
        plan_layouts("Qwen3-235B-A22B", 16)


def test_plan_json_from_the_command_line(capsys):
    assert main(["plan", "--model", "Qwen3-4B", "--json", "--top", "3"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["model"] == "Qwen3-4B" and len(data["candidates"]) == 3
    assert data["command"].startswith("qwen3-trn train --preset 4b")
    assert all(math.isfinite(c["tokens_per_s"]) for c in data["candidates"])
    assert {row["constant"] for row in data["constants"]} >= {"peak bf16 TFLOPS per rank"}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--model", "Qwen3-9B"], "error: unknown model 'Qwen3-9B'"),
        (["--model", "tiny", "--measure"], "error: plan --measure trains the candidates on"),
        (["--model", "tiny", "--nproc", "2"], "error: --nproc sets a CPU plan's ranks"),
        (["--model", "8b", "--nodes", "2", "--measure"], "error: plan --measure trains the"),
    ],
)
def test_plan_mistakes_are_one_error_line(capsys, argv, message):
    assert main(["plan", *argv]) == 1
    err = capsys.readouterr().err
    assert err.startswith(message) and err.count("\n") == 1


@pytest.mark.slow
def test_plan_verify_agrees_with_the_estimate(capsys):
    """The best Qwen3-1.7B layout on one trn2, one block at full width on 64 fake ranks:
    the sharded state rank 0 holds is the estimate's, within the stated tolerance."""
    assert main(["plan", "--model", "Qwen3-1.7B", "--verify", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    check = data["verify"]
    assert check["world"] == 64 and check["layers"] == 1
    assert check["layout"] == data["candidates"][0]["layout"]
    assert check["relative_error"] <= check["tolerance"] and check["agrees"]


@pytest.mark.long
@pytest.mark.slow
def test_plan_measure_times_two_candidates_on_this_cpu(capsys):
    """The --measure mechanism at tiny scale: two candidates trained, ranked as measured."""
    argv = ["plan", "--model", "tiny", "--device", "cpu", "--seq-len", "64", "--measure",
            "--measure-top", "2", "--steps", "2", "--json"]  # fmt: skip
    assert main(argv) == 0
    data = json.loads(capsys.readouterr().out)
    rates = [m["measured_tokens_per_s_per_rank"] for m in data["measure"]]
    assert len(rates) == 2 and all(r > 0 for r in rates) and rates == sorted(rates, reverse=True)
    planned = [c["argv"] for c in data["candidates"][:2]]
    assert sorted(map(str, planned)) == sorted(str(m["argv"]) for m in data["measure"])


def test_the_planner_beside_awss_recipes():
    """Notebook 04's anchors: AWS's layouts are among the candidates, so the planner's
    choice is estimated at least as fast, and a difference comes with its reason."""
    from qwen3_trn_helpers.lessons import planner_anchors

    rows = planner_anchors()
    assert [(r["model"], r["nodes"]) for r in rows] == [
        ("Qwen3-4B", 1), ("Qwen3-30B-A3B", 1), ("Qwen3-30B-A3B", 2)
    ]  # fmt: skip
    assert rows[0]["recipe's layout"].startswith("TP 4 x FSDP 16, AC selective")
    assert rows[1]["recipe's layout"].startswith("FSDP 64, AC full")
    assert rows[2]["recipe's layout"].startswith("HSDP 2 x (FSDP 64), AC full")
    # AWS published one-node layouts only: the 2-node row is the presets' HSDP rule
    assert [r["recipe"] for r in rows] == [
        "AWS's",
        "AWS's",
        "preset rule: AWS's 1-node layout, HSDP",
    ]
    for row in rows:
        assert row["planner tokens/s (est.)"] >= row["recipe tokens/s (est.)"]
        same = row["planner's layout"] == row["recipe's layout"]
        assert (
            row["why they differ"] == "the same layout"
            if same
            else "slower" in row["why they differ"] or "ties" in row["why they differ"]
        )
