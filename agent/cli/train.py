"""``scoretune train``: the fields of :class:`agent.rl.train.Args` become the options."""

from __future__ import annotations

import typing
from typing import Any

from agent.cli.options import dataclass_command
from agent.cli.render import console


def _train(args: Any) -> None:
    from agent.rl.train import train

    path = train(args)
    console.print(f"model: [bold]{path}[/]  config: {path.with_suffix('.json')}")


def _train_command() -> typing.Callable[..., None]:
    from agent.rl.train import Args

    return dataclass_command(
        Args, _train, "Train a tuning policy (SB3 PPO or SAC) on the simulator over the training scenarios."
    )


train_command = _train_command()
