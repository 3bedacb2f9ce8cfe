"""``python -m agent.cli``: what the ``scoretune`` entry point runs (the lab table starts it this way)."""

from agent.cli.app import main

main()
