"""The lab controller's process: ``python -m testbed.local.controllers --state-dir DIR [--port P]``.

It reads the lab description ``lab.up`` wrote, takes the controller of its platform from
:mod:`testbed.platforms` (the one lookup) and serves until stopped or until the lab's owner dies.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
from pathlib import Path

from functions.platform import DEFAULT_PLATFORM
from testbed.local.controllers.base import LabControl, serve
from testbed.local.state import LabState
from testbed.platforms import platform_entry


def controller_for(state: LabState) -> LabControl:
    """The controller of the platform the lab description names (Knative unless it says otherwise)."""
    lab = state.read_lab() or {}
    entry = platform_entry(lab.get("platform", DEFAULT_PLATFORM), field="platform", file=str(state.lab_file))
    return entry.lab_controller_class()(state)


def run(state_dir: Path, port: int) -> None:
    state = LabState(state_dir)

    async def main() -> None:
        await serve(controller_for(state), state, port)

    asyncio.run(main())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testbed.local.controllers")
    parser.add_argument("--state-dir", required=True)
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s controller %(levelname)s %(message)s")
    run(Path(args.state_dir), args.port)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
