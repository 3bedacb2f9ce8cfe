"""HTML rendering: SeBS's ``110.dynamic-html`` (a jinja2 page with a table of random numbers).

The template is compiled once at import, as a warm instance would hold it, so a request pays only
for rendering ``random_len`` rows: interpreter-bound CPU with output proportional to the table.
"""

from __future__ import annotations

import hashlib
import random
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jinja2

from functions.payload import int_param, str_param

_ENV = jinja2.Environment(
    loader=jinja2.FileSystemLoader(Path(__file__).resolve().parent),
    autoescape=jinja2.select_autoescape(["html", "html.j2"]),
)
_TEMPLATE = _ENV.get_template("template.html.j2")


def handle(payload: dict[str, Any]) -> dict[str, Any]:
    """Render the page (payload keys ``username``, ``random_len``, ``seed``)."""
    username = str_param(payload, "username", "testname", max_length=256)
    size = int_param(payload, "random_len", 5_000, low=0, high=10_000_000)
    seed = int_param(payload, "seed", 0, low=0, high=2**32 - 1)
    rng = random.Random(seed)
    numbers = [rng.randint(0, 1_000_000) for _ in range(size)]
    html = _TEMPLATE.render(
        username=username, cur_time=datetime.now(UTC).isoformat(timespec="seconds"), random_numbers=numbers
    )
    return {"bytes": len(html), "rows": size, "sha256": hashlib.sha256(html.encode()).hexdigest()}
