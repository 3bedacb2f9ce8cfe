"""What the embedded lab measures about itself: its run-to-run noise (``noise.py``) and its fidelity
against the simulator (``fidelity.py``); studies of the lab, not its mechanics."""
