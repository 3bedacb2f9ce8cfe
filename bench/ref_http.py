"""Reference for the replay benchmark: the closed-loop request rate of this machine's loopback.

One keep-alive ``http.client`` connection sends requests back to back to a threaded
``http.server`` on 127.0.0.1. It is the ceiling a Python load generator meets on this machine
before any scheduling, so replay's open-loop rate is reported as a share of it. Prints JSON.
"""

from __future__ import annotations

import argparse
import http.client
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
        length = int(self.headers.get("Content-Length", 0))
        self.rfile.read(length)
        body = b'{"ok":true}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=3.0)
    args = ap.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    conn = http.client.HTTPConnection("127.0.0.1", server.server_address[1])
    n = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < args.seconds:
        conn.request("POST", "/", body=b"{}", headers={"Content-Type": "application/json"})
        conn.getresponse().read()
        n += 1
    elapsed = time.perf_counter() - t0
    server.shutdown()
    print(json.dumps({"reference": "closed-loop http.client keep-alive vs ThreadingHTTPServer on 127.0.0.1",
                      "requests_per_s": n / elapsed}))


if __name__ == "__main__":
    main()
