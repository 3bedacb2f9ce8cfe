"""Image thumbnail: SeBS's ``210.thumbnailer`` / FunctionBench's ``image_processing`` with Pillow.

A request decodes a ``width``×``height`` JPEG, shrinks it to fit ``max_size`` and encodes the
thumbnail, as the upstream functions do with an image from object storage. The source JPEG is a
deterministic rendering (a Mandelbrot set over gradients, so it has real detail for the codec)
made once per size and kept in memory, as a warm instance would keep a downloaded object; the
default size is made by ``warm()`` before the instance reports ready.
"""

from __future__ import annotations

import functools
import hashlib
import io
from typing import Any

from PIL import Image

from functions.payload import int_param

DEFAULT_WIDTH, DEFAULT_HEIGHT = 4000, 3000


@functools.lru_cache(maxsize=4)
def _source_jpeg(width: int, height: int) -> bytes:
    # The fractal is computed at a quarter of the size and scaled up: the codec still sees real
    # detail, and making the source stays a small part of a cold start.
    small = (max(1, width // 4), max(1, height // 4))
    detail = Image.effect_mandelbrot(small, (-2.2, -1.3, 0.8, 1.3), 64).resize(
        (width, height), Image.Resampling.BICUBIC
    )
    horizontal = Image.linear_gradient("L").rotate(90).resize((width, height))
    vertical = Image.radial_gradient("L").resize((width, height))
    image = Image.merge("RGB", (detail, horizontal, vertical))
    out = io.BytesIO()
    image.save(out, format="JPEG", quality=90)
    return out.getvalue()


def warm() -> None:
    """Prepare the default-size source, as a warm instance holds the object it downloaded."""
    _source_jpeg(DEFAULT_WIDTH, DEFAULT_HEIGHT)


def handle(payload: dict[str, Any]) -> dict[str, Any]:
    """Thumbnail a JPEG (payload keys ``width``, ``height``, ``max_size``, ``quality``)."""
    width = int_param(payload, "width", DEFAULT_WIDTH, low=1, high=12_000)
    height = int_param(payload, "height", DEFAULT_HEIGHT, low=1, high=12_000)
    max_size = int_param(payload, "max_size", 200, low=1, high=4096)
    quality = int_param(payload, "quality", 85, low=1, high=95)
    source = _source_jpeg(width, height)
    with Image.open(io.BytesIO(source)) as image:
        image.load()
        image.thumbnail((max_size, max_size), Image.Resampling.LANCZOS)
        out = io.BytesIO()
        image.save(out, format="JPEG", quality=quality)
        size = image.size
    data = out.getvalue()
    return {
        "source_bytes": len(source),
        "thumbnail_bytes": len(data),
        "thumbnail_size": list(size),
        "sha256": hashlib.sha256(data).hexdigest(),
    }
