from qwen3_trn_helpers import scaling
from qwen3_trn_helpers.launch import torchrun_command, train_argv


def test_trn2_topology():
    t = scaling.Topology()
    assert (t.physical_cores, t.logical_cores, t.hbm_gib_per_logical_core) == (128, 64, 24)
    assert t.peak_tflops_per_logical_core == 158  # torchtitan: 79 TFLOPS x LNC 2
    assert scaling.Topology(lnc=1).logical_cores == 128


def test_memory_estimates_behave():
    short, long = scaling.memory_per_core("4b", 1024), scaling.memory_per_core("4b", 8192)
    assert long.activations_gib > 7 * short.activations_gib  # linear in seq (no S^2 term)
    assert long.params_gib == short.params_gib
    moe = scaling.memory_per_core("30b-a3b")
    assert moe.total_gib > moe.hbm_gib > moe.total_full_ac_gib  # why its preset uses AC
    assert moe.params_gib * 1024**3 * 64 / 4 > 30e9  # 30.5 B parameters, sharded 64 ways


def test_mfu_round_trip_and_flops():
    n, flops = scaling.params_and_flops_per_token(scaling.get_preset("4b"), 4096)
    assert 4.0e9 < n < 4.05e9 and flops > 6 * n  # 6N plus attention
    tps = scaling.tokens_per_s_for_mfu(40, flops)
    assert abs(scaling.mfu_percent(tps, flops) - 40) < 1e-9


def test_launch_commands():
    cmd = scaling.trn2_launch_command("nki_moe")
    assert "--nproc-per-node=64" in cmd and "--preset 30b-a3b" in cmd
    assert cmd.startswith("NEURON_LOGICAL_NC_CONFIG=2 torchrun")
    argv = train_argv("out", variant="native", steps=3, overwrite=True, seq_len=None)
    assert argv == [
        "--out",
        "out",
        "--no-progress",
        "--variant",
        "native",
        "--steps",
        "3",
        "--overwrite",
    ]
    full = torchrun_command(2, argv)
    assert full[1:4] == ["-m", "torch.distributed.run", "--standalone"]
