"""An error names an option as its reader types it: ``--overwrite`` on the command line,
``overwrite=True`` in Python (a notebook called run(), not qwen3-trn). The message is
written once, in the command line's words; the Python face renders it."""

from __future__ import annotations

import pytest

from qwen3_trn_helpers.cli import main
from qwen3_trn_helpers.errors import ConfigError, RunFolderError, cli_face, in_python_words
from qwen3_trn_helpers.runs.folder import prepare_out_dir
from qwen3_trn_helpers.training.spec import RunSpec


@pytest.mark.parametrize(
    "cli, python",
    [
        ("pass a new --out folder, or --overwrite to replace it",
         "pass a new out folder, or overwrite=True to replace it"),
        ("pass --resume auto (and --checkpoint-interval N) too",
         'pass resume="auto" (and checkpoint_interval=N) too'),
        ("--resume from the last checkpoint", "resume=True from the last checkpoint"),
        ("pass --keep-checkpoints 2 or more", "pass keep_checkpoints=2 or more"),
        ("needs --rdzv-endpoint HOST:PORT.", "needs rdzv_endpoint=HOST:PORT."),
        ("or --out runs/b.", 'or out="runs/b".'),
        ("use --attention causal", 'use attention="causal"'),
        ("Lower --lr, or check", "Lower lr, or check"),
        # left as written: another tool's flags, code spans and command examples
        ("torchrun --nproc_per_node=64", "torchrun --nproc_per_node=64"),
        ("--container-image x", "--container-image x"),
        ("(qwen3-trn train --export-hf)", "(qwen3-trn train --export-hf)"),
        ("run `--overwrite` by hand", "run `--overwrite` by hand"),
    ],
)  # fmt: skip
def test_a_flag_in_python_words(cli, python):
    assert in_python_words(cli) == python


def test_a_used_run_folder_named_for_each_face(tmp_path):
    """The issue's case: run(out=...) into a folder holding a run said "pass a new --out
    folder, or --overwrite" to a notebook, which has no flags."""
    (tmp_path / "metrics.jsonl").write_text("{}\n")
    with pytest.raises(RunFolderError) as e:
        prepare_out_dir(tmp_path)
    assert "pass a new out folder, or overwrite=True to replace it" in str(e.value)
    assert "--" not in str(e.value)
    with cli_face():
        assert "pass a new --out folder, or --overwrite to replace it" in str(e.value)
    assert "--overwrite" in e.value.args[0]  # what a child process prints for its parent


def test_the_command_line_names_flags(tmp_path, capsys):
    with pytest.raises(ConfigError) as e:
        RunSpec(resume=True, out=str(tmp_path))
    assert "checkpoint_interval=N" in str(e.value) and "--checkpoint" not in str(e.value)
    assert main(["train", "--resume", "--out", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "--checkpoint-interval N" in err
    assert "checkpoint_interval=N" not in err
