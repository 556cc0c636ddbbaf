"""A hosted server whose operator suspended the vendor's account answers 403 Tenant is
suspended. That is the vendor's matter, not the customer's license: the stored lease and
token are kept, the lease answers licensed until its exp and tenant_suspended after it, the
server is asked at most once a minute, and one answer after the suspension is lifted
licenses the app again. A fake server on a real socket, signing real leases."""
import base64
import json
import os
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

import keyhouse
from keyhouse import KeyhouseError


def _b64(data) -> str:
    raw = data if isinstance(data, bytes) else json.dumps(data).encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


class FakeServer:
    """A hosted server of one tenant: leases of an hour (renewed after half an hour) on the
    real clock, the client's nonce signed into them; every request answered 403 Tenant is
    suspended while `suspended`."""

    def __init__(self, floating=False):
        self.floating = floating
        self.suspended = False
        self.requests = {}
        self.lock = threading.Lock()
        self.key = Ed25519PrivateKey.generate()
        self.kid = "kid-t_vendor"
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _answer(self, status, obj):
                body = json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                self._serve()

            def do_POST(self):
                self._serve()

            def _serve(self):
                url = urllib.parse.urlparse(self.path)
                n = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(n)) if n else {}
                with server.lock:
                    server.requests[url.path] = server.requests.get(url.path, 0) + 1
                    suspended = server.suspended
                if suspended:
                    return self._answer(403, {"error": "Tenant is suspended"})
                if url.path == "/v1/verify-license":
                    return self._answer(200, {"valid": True, "tier": "pro", "product_id": "app", "status": "active"})
                if url.path == "/v1/activate-license":
                    return self._answer(200, {"activated": True, "token": "act_1"})
                if url.path == "/v1/leases":
                    return self._answer(200, {"lease": server.lease(body["key"], body.get("nonce"))})
                if url.path == "/v1/lease-keys":
                    tenant = urllib.parse.parse_qs(url.query).get("tenant_id", [""])[0]
                    x = server.key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
                    keys = [{"kty": "OKP", "crv": "Ed25519", "kid": server.kid, "x": _b64(x)}] if tenant == "t_vendor" else []
                    return self._answer(200, {"keys": keys})
                return self._answer(404, {"error": "Not found"})

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def lease(self, key, nonce):
        now = int(time.time())
        claims = {"iss": "https://licenses.example.com", "sub": key, "aud": "app", "jti": "j", "iat": now, "exp": now + 3600,
                  "renew_after": now + 1800, "tier": "pro", "status": "active", "license_expires_at": None, "limits": {},
                  "entitlements": [], "instance_id": "m", "floating": self.floating, "components": None, "tenant_id": "t_vendor"}
        if nonce:
            claims["nonce"] = nonce
        signing_input = _b64({"alg": "EdDSA", "kid": self.kid, "typ": "keyhouse-lease+jwt"}) + "." + _b64(claims)
        return signing_input + "." + _b64(self.key.sign(signing_input.encode()))

    def count(self, route):
        with self.lock:
            return self.requests.get(route, 0)

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


class Clock:
    def __init__(self):
        self.now = time.time()

    def __call__(self):
        return self.now


@pytest.fixture
def server():
    s = FakeServer()
    yield s
    s.close()


def activated(s, tmp_path, **extra):
    clock = Clock()
    store = os.path.join(str(tmp_path), "store.json")

    def make():
        return keyhouse.Client(s.url, "app", "KEY-1", store_path=store, components={}, now=clock, **extra)

    c = make()
    c.activate("m")

    def stored():
        with open(store, encoding="utf-8") as f:
            return json.load(f)

    return c, clock, make, stored


def raises(code, fn, *args):
    with pytest.raises(KeyhouseError) as err:
        fn(*args)
    assert err.value.code == code, err.value


def test_tenant_suspended_keeps_the_lease_and_paces_the_requests(server, tmp_path):
    c, clock, make, stored = activated(server, tmp_path)
    v = c.check()
    assert (v.licensed, v.offline) == (True, False), v
    server.suspended = True
    asked = server.count("/v1/leases")
    # Past renew_after, for ten minutes a check every second: each starts a renewal the
    # server refuses, and each is licensed from the lease.
    clock.now += 1801
    for i in range(600):
        v = c.check()
        assert (v.licensed, v.offline) == (True, True), f"check {i}, suspended: {v}"
        c.wait_renewal()
        clock.now += 1
    n = server.count("/v1/leases") - asked
    assert 2 <= n <= 10, f"{n} lease requests in 600 checks over ten minutes, want one a minute (2 to 10)"
    st = stored()
    assert st.get("lease") and st.get("token") and st.get("suspended_at"), "the store keeps the lease, the token and the suspension"

    # Other calls fail with tenant_suspended, at the same pace, and drop nothing.
    clock.now += 60
    raises("tenant_suspended", c.verify)
    raises("backing_off", c.track_usage, "users", 1)
    clock.now += 60
    raises("tenant_suspended", c.track_usage, "users", 1)
    # A restarted app keeps the pace: no request within the minute, licensed from the lease.
    asked = server.count("/v1/leases")
    restarted = make()
    v = restarted.check()
    assert (v.licensed, v.offline) == (True, True), f"restarted: {v}"
    restarted.wait_renewal()
    assert server.count("/v1/leases") - asked == 0, "a restarted app asked within the minute"

    # Past the lease's exp: tenant_suspended, not expired; still one request a minute.
    clock.now += 3600
    asked = server.count("/v1/leases")
    for i in range(120):
        v = c.check()
        assert (v.licensed, v.reason) == (False, "tenant_suspended"), f"check {i} past exp: {v}"
        clock.now += 1
    m = server.count("/v1/leases") - asked
    assert 1 <= m <= 2, f"{m} lease requests in two minutes past exp, want one a minute"
    st = stored()
    assert st.get("lease") and st.get("token"), "the lease or the token was dropped"

    # The suspension is lifted: the first renewal a minute after the last ask is licensed.
    server.suspended = False
    clock.now += 60
    v = c.check()
    assert (v.licensed, v.offline) == (True, False), f"after the suspension was lifted: {v}"
    assert "suspended_at" not in stored(), "the suspension is still stored after a lease"


def test_tenant_suspended_with_no_lease(server, tmp_path):
    c, clock, _, _ = activated(server, tmp_path)
    server.suspended = True
    for i in range(30):
        v = c.check()
        assert (v.licensed, v.reason) == (False, "tenant_suspended"), f"check {i}: {v}"
        clock.now += 1
    assert server.count("/v1/leases") == 1, "lease requests in 30 checks"
    server.suspended = False
    clock.now += 60
    assert c.renew().licensed, "lifted"


def test_tenant_suspended_floating_lease_lapses_once_and_keeps_the_token(tmp_path):
    s = FakeServer(floating=True)
    try:
        lapsed = []
        c, clock, _, stored = activated(s, tmp_path, on_lapsed=lapsed.append)
        v = c.check()
        assert v.licensed and v.floating, v
        s.suspended = True
        clock.now += 3601
        for i in range(3):
            v = c.check()
            assert (v.licensed, v.reason) == (False, "seat_lapsed"), f"check {i}: {v}"
            clock.now += 60
        assert len(lapsed) == 1, lapsed
        assert stored().get("token"), "the token was dropped"
    finally:
        s.close()
