"""JSON serialise and parse: FunctionBench's ``json_dumps_loads`` on a locally generated document.

FunctionBench fetches its JSON from a URL; here the document is generated from a seed so the
function needs no network. Building, dumping and loading ``records`` nested records allocates
many small objects, so the function is memory-shaped as well as CPU-bound.
"""

from __future__ import annotations

import json
import random
from typing import Any

from functions.payload import int_param


def _document(records: int, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    return {
        "version": 1,
        "records": [
            {
                "id": i,
                "name": f"user-{rng.getrandbits(32):08x}",
                "score": rng.random(),
                "active": rng.random() < 0.5,
                "tags": [f"t{rng.randrange(100)}" for _ in range(3)],
                "location": {"lat": rng.uniform(-90, 90), "lon": rng.uniform(-180, 180)},
            }
            for i in range(records)
        ],
    }


def handle(payload: dict[str, Any]) -> dict[str, Any]:
    """Dump the document to a string and parse it back (payload keys ``records``, ``seed``)."""
    records = int_param(payload, "records", 50_000, low=0, high=5_000_000)
    seed = int_param(payload, "seed", 0, low=0, high=2**32 - 1)
    document = _document(records, seed)
    text = json.dumps(document)
    parsed = json.loads(text)
    if len(parsed["records"]) != records:
        raise RuntimeError("JSON round trip lost records")
    active = sum(1 for r in parsed["records"] if r["active"])
    return {"records": records, "bytes": len(text), "active": active}
