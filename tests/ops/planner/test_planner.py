"""The Qwen3 family presets and the layout planner (``qwen3-trn plan``).

The fast tests plan on paper (memory model, cost model: no model is built but on the
meta device); the two slow ones dry-run the best layout with torchtitan's fake backend
and train two tiny candidates on this CPU.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
from pathlib import Path

import pytest

from qwen3_trn_helpers.cli import build_parser, main, spec_from_args
from qwen3_trn_helpers.errors import ConfigError
from qwen3_trn_helpers.model.family import FAMILY, find_model
from qwen3_trn_helpers.model.presets import PRESETS
from qwen3_trn_helpers.model.shapes import active_parameter_count, embedding_parameter_count
from qwen3_trn_helpers.ops.planner.cost import RECOMPUTE, all_reduce, estimate_step, ring_collective
from qwen3_trn_helpers.ops.planner.layout import TIE
from qwen3_trn_helpers.ops.planner.machines import PLANNER_MARGIN, Link, trn2_machine
from qwen3_trn_helpers.ops.planner.search import EP_EXCLUDED, LOCAL_BATCHES, plan_layouts
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
    """The planner proposes exactly the layouts a trn2 run's own memory check accepts,
    within its headroom (90% of usable) and the global batch (one sequence per rank)."""
    result = plan_layouts("Qwen3-8B", 1)
    proposed = {(c.tp, c.activation_checkpoint, c.local_batch) for c in result.candidates}
    accepted = set()
    for tp in (1, 2, 4):
        for ac in ACTIVATION_CHECKPOINTING:
            for lb in LOCAL_BATCHES:
                spec = RunSpec(preset="8b", nproc=64, out="x", tp=tp, dp_replicate=1,
                               activation_checkpoint=ac, local_batch_size=lb)  # fmt: skip
                try:
                    plan = plan_run(spec, device_type="neuron")
                except ConfigError as e:
                    assert "GiB per NeuronCore" in str(e)
                    continue
                memory = plan.memory()
                within = memory.total_gib <= PLANNER_MARGIN * memory.usable_gib
                if within and lb * 64 // tp <= 64:  # the global batch: 64 sequences
                    accepted.add((tp, ac, lb))
    assert proposed == accepted
    assert 0 < result.rejected and result.larger_batch > 0
    assert result.considered == len(proposed) + result.rejected + result.larger_batch
    assert all(c.memory.total_gib <= 0.9 * 0.9 * c.memory.hbm_gib for c in result.candidates)
    rates = [c.tokens_per_s for c in result.candidates]
    assert all(b <= a * (1 + TIE) for a, b in zip(rates, rates[1:], strict=False))


def test_the_printed_command_trains_the_best_layout():
    """The command's flags, parsed by the CLI, rebuild the best candidate's spec."""
    result = plan_layouts("Qwen3-8B", 4)
    command = result.command()
    assert command.startswith("qwen3-trn slurm ")  # several nodes: a batch script
    args = build_parser().parse_args(command.split()[1:])
    # (its hub corpus prepared first, on shared storage: the job reads that folder)
    prepared = result.best.spec.replace(corpus=f"{result.best.spec.out}-data")
    assert spec_from_args(args) == prepared.with_absolute_paths()
    assert "runner-up" in result.runner_up_reason()


def test_the_cost_model_moves_with_its_constants():
    shape = PRESETS["30b-a3b"].shape
    trn2 = trn2_machine(2)
    common = dict(nnodes=2, tp=1, local_batch=1, seq_len=4096, reduce_bytes=2)
    # bandwidth alone (no latency): half the EFA, twice the HSDP all-reduce
    trn2 = dataclasses.replace(trn2, inter=Link(trn2.inter.gb_s, 0.0))
    hsdp = estimate_step(shape, trn2, dp_replicate=2, activation_checkpoint="full", **common)
    slower_efa = dataclasses.replace(trn2, inter=Link(trn2.inter.gb_s / 2, 0.0))
    hsdp_slow = estimate_step(
        shape, slower_efa, dp_replicate=2, activation_checkpoint="full", **common
    )
    assert hsdp_slow.hsdp_s == pytest.approx(2 * hsdp.hsdp_s) and hsdp.hsdp_s > 0
    # latency: a ring step pays it; the all-reduce takes ring or tree, the faster
    slow_hops = dataclasses.replace(trn2, inter=Link(trn2.inter.gb_s, 1000.0))
    assert ring_collective(8, 0, slow_hops.inter) == pytest.approx(7 * 1e-3)
    assert all_reduce(1024, 0, slow_hops.inter) == pytest.approx(2 * 10 * 1e-3)
    fsdp = estimate_step(shape, trn2, dp_replicate=1, activation_checkpoint="none", **common)
    assert fsdp.hsdp_s == 0 and fsdp.tp_s == 0
    assert hsdp.recompute_s == pytest.approx(hsdp.compute_s * RECOMPUTE["full"])
    tp = estimate_step(PRESETS["8b"].shape, trn2, dp_replicate=1, activation_checkpoint="none",
                       **{**common, "tp": 4})  # fmt: skip
    assert tp.tp_s > 0
    # every constant is shown with where it comes from
    assert all(row["source"] for row in trn2.constants())


def test_moe_plans_say_why_there_is_no_expert_parallelism():
    result = plan_layouts("Qwen3-30B-A3B", 2)
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
    modes = {a["mode"]: a for a in check["activations"]}
    assert list(modes) == ["none", "selective", "full"]
    assert all(a["relative_error"] <= a["tolerance"] and a["agrees"] for a in modes.values())


@pytest.mark.long
@pytest.mark.slow
def test_verify_activations_per_ac_mode_agree_with_the_estimate(monkeypatch):
    """One Qwen3-0.6B block (real widths, 1,024 tokens, fake tensors): what it keeps for
    its backward under each AC mode is memory.py's per-layer term within the tolerance;
    an estimate with its activation term doubled is caught."""
    from qwen3_trn_helpers.ops.planner import activations
    from qwen3_trn_helpers.training import memory

    # measured once: the doubled estimate below is checked against the same blocks
    monkeypatch.setattr(activations, "measure_block", functools.cache(activations.measure_block))
    shape = PRESETS["0.6b"].shape
    checks = activations.check_activations(shape, 1024)
    assert [c.mode for c in checks] == ["none", "selective", "full"]
    for c in checks:
        assert c.relative_error <= activations.ACTIVATION_TOLERANCE and c.agrees, c.row()
    measured = [c.measured_mib for c in checks]
    assert measured == sorted(measured, reverse=True) and measured[2] > 0
    real = memory.layer_activation_values
    monkeypatch.setattr(memory, "layer_activation_values", lambda *a, **k: 2 * real(*a, **k))
    assert not any(c.agrees for c in activations.check_activations(shape, 1024))


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
    """Notebook 05's anchors: AWS's layouts at AWS's own batch (local batch 1, no
    accumulation), the planner's choice at that batch estimated at least as fast, a
    difference with its reason, and HSDP for every model at 16 nodes."""
    from qwen3_trn_helpers.lessons import planner_anchors

    rows = planner_anchors()
    assert [(r["model"], r["nodes"], r["global batch"]) for r in rows] == [
        ("Qwen3-4B", 1, 16), ("Qwen3-30B-A3B", 1, 64), ("Qwen3-30B-A3B", 2, 128),
        ("Qwen3-4B", 16, 256), ("Qwen3-30B-A3B", 16, 1024),
    ]  # fmt: skip
    # AWS's recipe as AWS ran it: no microbatches (the label would say so)
    assert rows[0]["recipe's layout"] == "TP 4 x FSDP 16, AC selective, local batch 1"
    assert rows[1]["recipe's layout"] == "FSDP 64, AC full, local batch 1"
    assert rows[2]["recipe's layout"].startswith("HSDP 2 x (FSDP 64), AC full")
    # AWS published one-node layouts only: the other rows are the presets' HSDP rule
    assert [r["recipe"] for r in rows] == ["AWS's"] * 2 + [
        "preset rule: AWS's 1-node layout, HSDP"
    ] * 3
    # 30B-A3B's recipe needs 21.1 GiB of a core's 21.6 usable: train accepts it, the
    # planner's 10% headroom does not (on one node nothing fits it)
    assert rows[1]["planner's layout"] == "-" and "headroom" in rows[1]["why they differ"]
    assert "over the planner's limit" in rows[2]["why they differ"]
    row = rows[0]
    assert row["planner tokens/s (est.)"] >= row["recipe tokens/s (est.)"]
    assert "slower" in row["why they differ"] or "ties" in row["why they differ"]
    # what notebook 05's prose says of them: the 4B keeps TP 4 and skips recompute; at
    # 16 nodes every planner layout has replicas (HSDP)
    recipe, best = rows.choices[0]
    assert (recipe.tp, best.tp, recipe.activation_checkpoint, best.activation_checkpoint) == (
        4, 4, "selective", "none"
    )  # fmt: skip
    sixteen = [best for (_, best), r in zip(rows.choices, rows, strict=True) if r["nodes"] == 16]
    assert len(sixteen) == 2 and all(best.dp_replicate > 1 for best in sixteen)


# ------------------------------------------------------------ issue 30: a planner to trust

DATA = Path(__file__).parents[2] / "data"


@pytest.fixture(autouse=True)
def _no_users_calibration(tmp_path, monkeypatch):
    """Plans here never read a calibration a person's --measure wrote."""
    monkeypatch.setenv("QWEN3_TRN_CALIBRATION", str(tmp_path / "calibration.json"))


def test_backtest_replays_torchtitans_published_h100_rows():
    """Every bf16 torchtitan row on H100 (backtest.py says which and where), replayed with
    --layout: tokens/s per GPU, and memory where the page gives it, each within 15%; the
    efficiency is fitted on the 8-GPU FSDP rows only (one per mode) and the stored
    constant is that fit; the three TP rows (405B, 70B, 8B at TP 8) are predictions."""
    from backtest import FITTED_ON, GOAL, ROWS, backtest, fit_efficiency

    from qwen3_trn_helpers.ops.planner.machines import H100_EFFICIENCY

    replays = backtest(DATA)
    assert [r.row for r in replays] == list(ROWS) and len(ROWS) == 7 and GOAL == 0.15
    for r in replays:
        assert abs(r.throughput_error) <= GOAL, r.to_row()
        assert r.memory_error is None or abs(r.memory_error) <= GOAL, r.to_row()
    predicted = [r for r in replays if not r.fitted]
    assert len(predicted) == 5
    assert sum("tp=8" in r.row.layout for r in predicted) == 3
    for mode, row in FITTED_ON.items():
        assert H100_EFFICIENCY[mode] == pytest.approx(fit_efficiency(mode, DATA), abs=0.002)
        assert row.compiled == (mode == "compiled")


def test_tp_collectives_ride_nccls_own_nvlink_figure():
    """The H100's link inside a node is NCCL's model of a ring over Hopper NVLink (18
    links x 20.6 GB/s, nccl src/graph/topo.h), not the datasheet's 450 GB/s: with the
    datasheet's the 8B TP 8 row came out 19% fast, over the goal."""
    from dataclasses import replace

    from backtest import GOAL, ROWS, replay

    from qwen3_trn_helpers.ops.planner import machines

    machine = machines.get_machine("h100-96gb")
    assert machine.intra.gb_s == pytest.approx(18 * 20.6)
    tp_row = next(r for r in ROWS if r.model == "llama3.1-8b" and "tp=8" in r.layout)
    with_ncc = replay(tp_row, DATA)
    peak = replace(machine, intra=machines.Link(machines.NVLINK4_GB_S, machine.intra.latency_us))
    with pytest.MonkeyPatch.context() as m:
        m.setattr("backtest.get_machine", lambda key: peak)
        with_peak = replay(tp_row, DATA)
    assert abs(with_ncc.throughput_error) <= GOAL < with_peak.throughput_error


def test_a_tie_is_wider_than_the_models_held_out_error():
    """Two layouts of one model on one machine differ in their collectives; the model's
    error on held-out FSDP rows (how collectives scale from 8 to 128 GPUs) is under the
    tie band, so a closer call is not made on the estimate."""
    from backtest import backtest

    held_out = [r for r in backtest(DATA) if not r.fitted and "tp=" not in r.row.layout]
    assert held_out and max(abs(r.throughput_error) for r in held_out) < TIE


def test_llama_config_json_is_read_with_its_published_size():
    from qwen3_trn_helpers.ops.planner.models import load_model

    counts = {"8b": 8.03e9, "70b": 70.6e9, "405b": 405.9e9}  # Llama 3 paper / model cards
    for size, published in counts.items():
        model = load_model(str(DATA / f"llama3.1-{size}" / "config.json"))
        assert model.architecture == "llama" and not model.shape.tie_embeddings
        assert model.parameters == pytest.approx(published, rel=0.002), size


def test_layout_json_has_the_terms(capsys):
    argv = ["plan", "--model", str(DATA / "llama3.1-8b" / "config.json"), "--machine",
            "h100-96gb", "--seq-len", "8192", "--layout", "fsdp=8,ac=selective,local_batch=2",
            "--compile", "--json"]  # fmt: skip
    assert main(argv) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["ranks"] == 8 and data["parameters"] > 8e9 and data["compiled"]
    assert data["tokens_per_s_per_rank"] == pytest.approx(6667, rel=0.02)
    assert 60 < data["memory_gib_per_rank"] < 90
    assert {"compute_s", "recompute_s", "fsdp_s", "exposed_comm_s", "step_s"} <= set(
        data["estimate"]
    )
    assert {"activations", "logits", "FSDP buffers"} <= set(data["memory"])


@pytest.mark.parametrize("model", ["Qwen3-4B", "Qwen3-8B", "Qwen3-30B-A3B"])
def test_sixteen_nodes_keep_fsdp_inside_and_replicas_across(model):
    """Latency: a ring over 1,024 ranks pays EFA's per-step latency 1,023 times, so at
    16 nodes the plan is HSDP (AWS's practice), not FSDP over every rank."""
    best = plan_layouts(model, 16).best
    assert best.dp_replicate > 1, best.layout


def test_moe_blockwise_padding_is_counted():
    """30B-A3B at local batch 1: 4,096 x 8 pairs take 255 blocks of 256 (about 2x)."""
    from qwen3_trn_helpers.ops.planner.cost import expert_padding, flops_per_token

    shape = PRESETS["30b-a3b"].shape
    padding = expert_padding(shape, 4096, 256)
    assert padding == pytest.approx(255 * 256 / (4096 * 8))
    experts = 6 * shape.n_layers * shape.top_k * 3 * shape.dim * shape.moe_hidden_dim
    extra = flops_per_token(shape, 4096, padding) - flops_per_token(shape, 4096)
    assert extra == pytest.approx(experts * (padding - 1)) and padding > 1.9
    assert expert_padding(PRESETS["8b"].shape, 4096, 256) == 1.0


def test_global_batch_is_held_fixed():
    """Every candidate trains the same batch per optimizer step; accumulation fills it."""
    result = plan_layouts("Qwen3-30B-A3B", 16)
    # one node's 64 sequences cannot feed 1,024 data-parallel ranks (MoE: no TP): the
    # smallest batch 16 nodes allow, said so
    assert result.global_batch_tokens == 1024 * 4096
    assert {c.global_batch * c.seq_len for c in result.candidates} == {1024 * 4096}
    assert "the smallest batch 16 nodes allow" in result.batch_note
    asked = plan_layouts("Qwen3-4B", 1, global_batch_tokens=8 * 64 * 4096)
    assert {c.global_batch for c in asked.candidates} == {8 * 64}
    assert any(c.microbatches > 1 for c in asked.candidates)
    assert "as asked" in asked.batch_note


@pytest.mark.parametrize("nodes", [1, 4, 16])
def test_default_batch_stays_one_nodes_as_nodes_grow(nodes):
    """Qwen3-4B: 262,144 tokens (one node's 64 x 4096) on 1, 4 and 16 nodes alike where
    TP 4 lets the data-parallel ranks share it (16 nodes: 256 of them, a sequence each, so
    1,048,576 there); the lr never rises past its cap whatever the batch."""
    from qwen3_trn_helpers.ops.planner.batch import lr_cap

    result = plan_layouts("Qwen3-4B", nodes, local_batch=1)
    expected = 64 * 4096 if nodes <= 4 else 1024 // 4 * 4096
    assert result.global_batch_tokens == expected
    assert {c.global_batch * c.seq_len for c in result.candidates} == {expected}
    spec = result.best.spec
    cap = lr_cap(result.model)
    assert (spec.lr or PRESETS["4b"].lr) <= cap == PRESETS["4b"].lr
    assert "capped at" in result.lr_note and "square-root rule" in result.lr_note
    assert "global batch: " in result.render(1) and "lr: " in result.render(1)


def test_lr_rule_lowers_the_lr_for_a_smaller_batch_and_caps_a_larger_one():
    from qwen3_trn_helpers.ops.planner.batch import lr_note, scaled_lr
    from qwen3_trn_helpers.ops.planner.models import load_model

    model = load_model("Qwen3-4B")  # recipe: 3e-4 at 16 x 4096 tokens
    assert scaled_lr(model, 4 * 4096) == pytest.approx(1.5e-4)  # sqrt(1/4)
    assert "--lr" not in lr_note(model, 4 * 4096) and "capped" not in lr_note(model, 4 * 4096)
    assert scaled_lr(model, 16 * 4096) is None  # the recipe's own batch and lr
    assert scaled_lr(model, 16 * 16 * 4096) is None  # 4x by the rule: capped at 3e-4
    note = lr_note(model, 16 * 16 * 4096)
    assert "gives 0.0012" in note and "capped at 0.0003" in note
    big = load_model("Qwen3-32B")  # published 1.5e-4 past 13.5B; never below the recipe's
    assert "capped at 0.0003" in lr_note(big, 64 * 64 * 4096)


def test_plan_header_states_parameters_and_ranks(capsys):
    assert main(["plan", "--model", "Qwen3-30B-A3B", "--nnodes", "2", "--top", "1"]) == 0
    header = capsys.readouterr().out.splitlines()[0]
    assert "30.53 B parameters, 3.35 B active" in header
    assert "128 ranks (2 nodes x 64)" in header
    assert main(["plan", "--model", "Qwen3-4B", "--json", "--top", "1"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["parameters"] == data["active_parameters"] == PRESETS["4b"].shape.parameter_count()
    assert (data["nodes"], data["ranks_per_node"], data["ranks"]) == (1, 64, 64)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--model", "8b", "--nnodes", "100000"], "error: --nnodes 100000 is over the planner's"),
        (["--model", "tiny", "--device", "cpu", "--nproc", "4096"],
         "error: --nproc 4096 is more ranks than this machine's"),
        (["--model", "8b", "--verify", "--verify-layers", "37"],
         "error: --verify-layers 37 is more than Qwen3-8B's 36 layers"),
        # (--nodes: the old spelling, still taken)
        (["--model", "8b", "--machine", "trn2u", "--nodes", "6"],
         "error: --nnodes 6 on trn2u: an UltraServer is 4"),
        (["--model", "8b", "--layout", "pp=2"], "error: --layout pp=2: PP not modelled"),
        (["--model", "8b", "--layout", "cp=2"], "error: --layout cp=2: CP not modelled"),
        (["--model", "8b", "--layout", "tp=8"], "error: --layout tp=8: TP above 4"),
        (["--model", "8b", "--layout", "fsdp=3"], "error: --layout: tp 1 x dp_replicate 1"),
        (["--model", "8b", "--seq-len", "100000"], "error: --seq-len 100000 is over"),
        (["--model", "/nonexistent/config.json"],
         "error: /nonexistent/config.json does not exist; --model takes"),
    ],
)  # fmt: skip
def test_bad_plan_input_is_one_line_naming_the_limit(capsys, argv, message):
    assert main(["plan", *argv]) == 1
    err = capsys.readouterr().err
    assert err.startswith(message) and err.count("\n") == 1


def test_unmodelled_parallelisms_say_why():
    excluded = plan_layouts("Qwen3-8B", 1).excluded
    assert any(e.startswith("PP not modelled") for e in excluded)
    assert any(e.startswith("CP not modelled") for e in excluded)
    assert any(e.startswith("TP above 4") for e in excluded)


def test_a_calibration_is_used_by_later_plans(monkeypatch, tmp_path, capsys):
    """What --measure writes, a later plan on that machine uses, and says so."""
    from qwen3_trn_helpers.ops.planner.machines import get_machine, write_calibration

    before = plan_layouts("Qwen3-4B", 1)
    write_calibration(get_machine("trn2"), False, 0.2, {"measured_on": ["test"]})
    after = plan_layouts("Qwen3-4B", 1)
    assert after.machine.calibrated and after.machine.mfu_efficiency(False) == 0.2
    assert "efficiency measured on this machine" in after.header()
    assert after.best.estimate.compute_s > 1.5 * before.best.estimate.compute_s
    assert get_machine("h100").calibrated is None  # another machine keeps its own
    # a CPU's peak is timed by every plan: its calibration keeps the peak it used
    from qwen3_trn_helpers.ops.planner.machines import apply_calibration, cpu_machine

    write_calibration(cpu_machine(1, 2e12), False, 0.05, {})
    again = apply_calibration(cpu_machine(1, 1e12))
    assert (again.peak_tflops, again.mfu_efficiency(False)) == (2.0, 0.05)
    assert apply_calibration(cpu_machine(2, 1e12)).calibrated is None  # 2 ranks: not measured


def test_a_planned_global_batch_reaches_the_run():
    """The printed command's --global-batch-size is torchtitan's (accumulation): whole
    microbatches only, checked where a run is planned."""
    spec = RunSpec(preset="8b", nproc=64, out="x", tp=4, local_batch_size=1)
    assert plan_run(spec.replace(global_batch_size=64), device_type="neuron").tp == 4
    with pytest.raises(ConfigError, match="global_batch_size 17 must be a multiple of local"):
        plan_run(spec.replace(global_batch_size=17), device_type="neuron")
    best = plan_layouts("Qwen3-8B", 1).best
    assert best.spec.global_batch_size == best.global_batch == 64


def test_four_nodes_tie_goes_to_hsdp_and_the_reason_says_where_fsdp_runs():
    """At 4 nodes and the old default batch (a sequence per rank) FSDP over every node
    was 2% ahead of HSDP, under the tie band: HSDP goes first, and the reason says where
    each shards (a replica over 2 nodes is not "FSDP inside" a node)."""
    result = plan_layouts("Qwen3-4B", 4, global_batch_tokens=256 * 4096)
    assert result.best.dp_replicate == 4 and result.best.nodes_per_replica == 1
    assert not any(c.dp_replicate == 1 for c in result.candidates[:2])
    wide = plan_layouts("Qwen3-8B", 8)
    reason = wide.runner_up_reason()
    assert wide.best.dp_replicate == 8 and "ties on the estimate" in reason
    assert "each sharded inside a node" in reason and "each sharded over 2 nodes" in reason
    assert "FSDP inside" not in reason
