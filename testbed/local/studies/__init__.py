"""What the embedded lab measures about itself: its run-to-run noise (``noise.py``), its fidelity
against the simulator (``fidelity.py``), the anatomy of a cold start (``anatomy.py``) and its own
overhead (``overhead.py``: ``scoretune bench lab``); studies of the lab, not its mechanics."""
