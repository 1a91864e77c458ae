"""``qwen3-trn watch RUN``: a running job's nodes, from any machine that sees its folder.

Per node: its step time, its own time (without the wait for other nodes), how long its
ranks have been in the current step, and how long ago they last beat; a straggler or
a silent node named (training/node_status.py says how). ``--follow`` redraws it every
few seconds until Ctrl-C.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from ..errors import ConfigError


def add_watch_parser(sub: Any, debug: argparse.ArgumentParser) -> None:
    from ..runs.arguments import _number
    from ..training.node_status import SILENT_S, STRAGGLER_FACTOR

    watch = sub.add_parser(
        "watch",
        parents=[debug],
        help="a run's nodes: step times, a straggler or a silent node (from OUT/ranks)",
    )
    watch.add_argument("run", help="the run folder (--out of the run)")
    watch.add_argument("--follow", action="store_true", help="redraw every --every seconds")
    watch.add_argument("--every", type=lambda t: _number(float, 1, t), default=5.0,
                       metavar="S", help="seconds between redraws (default 5)")  # fmt: skip
    watch.add_argument("--factor", type=lambda t: _number(float, 1, t),
                       default=STRAGGLER_FACTOR, help="a node whose own step time is over "
                       "this many times the others' median is a straggler (default "
                       f"{STRAGGLER_FACTOR:g})")  # fmt: skip
    watch.add_argument("--silent-after", type=lambda t: _number(float, 1, t), default=SILENT_S,
                       metavar="S", help="a node with no heartbeat for S seconds is silent "
                       f"(default {SILENT_S:g}; ranks beat every few seconds)")  # fmt: skip


def cmd_watch(args: argparse.Namespace) -> int:
    from ..training.node_status import RANKS, screen

    run = Path(args.run).expanduser()
    if not run.is_dir():
        raise ConfigError(f"{run} is not a run folder; pass the --out of a run")
    if not (run / RANKS).is_dir() and not (run / "run.json").is_file():
        raise ConfigError(f"{run} holds no run (no run.json, no {RANKS}/); pass a run's --out")
    while True:
        shown = screen(run, factor=args.factor, silent_s=args.silent_after)
        if not args.follow:
            print(shown)
            return 0
        print("\033[2J\033[H" + time.strftime("%H:%M:%S ") + str(run) + "\n" + shown, flush=True)
        time.sleep(args.every)
