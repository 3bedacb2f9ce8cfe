"""AES in pure Python: FunctionBench's and vSwarm's ``pyaes`` function (CTR encrypt then decrypt).

pyaes implements AES in the interpreter, so this is CPU-bound with a tiny footprint; cost is
proportional to ``length_of_message × num_of_iterations``.
"""

from __future__ import annotations

import hashlib
from typing import Any

import pyaes

from functions.payload import int_param

# A fixed 256-bit key, as FunctionBench uses; the function measures work, not secrecy.
_KEY = bytes(range(32))


def handle(payload: dict[str, Any]) -> dict[str, Any]:
    """Encrypt and decrypt a deterministic message (payload keys ``length_of_message``,
    ``num_of_iterations``); fails loudly if a round trip does not restore the message."""
    length = int_param(payload, "length_of_message", 1000, low=1, high=10_000_000)
    iterations = int_param(payload, "num_of_iterations", 30, low=1, high=100_000)
    message = (b"scoretune-aes-" * (length // 14 + 1))[:length]
    ciphertext = b""
    for _ in range(iterations):
        ciphertext = pyaes.AESModeOfOperationCTR(_KEY).encrypt(message)
        plaintext = pyaes.AESModeOfOperationCTR(_KEY).decrypt(ciphertext)
        if plaintext != message:
            raise RuntimeError("AES CTR round trip did not restore the message")
    return {
        "length_of_message": length,
        "num_of_iterations": iterations,
        "ciphertext_sha256": hashlib.sha256(ciphertext).hexdigest(),
    }
