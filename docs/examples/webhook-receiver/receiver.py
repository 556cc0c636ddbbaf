"""receiver.py: a Keyhouse webhook receiver (Python 3 standard library only) that verifies
Keyhouse-Signature and skips events it has already handled.

    WEBHOOK_SECRET=whsec_... python3 receiver.py [port, default any free one]
"""
import hashlib
import hmac
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SECRET = os.environ["WEBHOOK_SECRET"].encode()
TOLERANCE_SECONDS = 300  # refuse replays of old deliveries
seen = set()  # use your database in production: deliveries are at least once
seen_lock = threading.Lock()  # requests run on threads: test and record as one step


def verify(header, body):
    """header: t=<unix>,v1=<hex>[,v1=<hex>...]; one v1 must be HMAC-SHA256(secret,
    "<t>.<body>") over the exact bytes received (one v1 per live secret during secret rolls)."""
    ts, sigs = None, []
    for part in (header or "").split(","):
        k, _, v = part.partition("=")
        if k == "t":
            ts = v
        elif k == "v1":
            sigs.append(v)
    if ts is None or not ts.isdigit() or abs(time.time() - int(ts)) > TOLERANCE_SECONDS:
        return False
    want = hmac.new(SECRET, ts.encode() + b"." + body, hashlib.sha256).hexdigest()
    return any(hmac.compare_digest(want, s.lower()) for s in sigs)


class Receiver(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if not verify(self.headers.get("Keyhouse-Signature"), body):
            print("rejected", flush=True)
            self.send_response(400)
            self.end_headers()
            return
        event = json.loads(body)
        with seen_lock:
            duplicate = event["id"] in seen
            seen.add(event["id"])
        if duplicate:
            print("duplicate", event["id"], flush=True)
        else:
            print("verified", event["id"], event["type"], flush=True)  # handle the event here
        self.send_response(204)  # answer 2xx fast; do slow work afterwards
        self.end_headers()

    def log_message(self, *args):
        pass


if __name__ == "__main__":
    server = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1]) if len(sys.argv) > 1 else 0), Receiver)
    print("listening on", server.server_address[1], flush=True)
    server.serve_forever()
