"""Keyhouse client: online calls with failure backoff, offline verification, check()."""
from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import random
import re
import secrets
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey


class KeyhouseError(Exception):
    """Every failure: an answer of the server (status, its "error" text as message) or a
    condition found on this side (status 0). `code` is the machine-readable name."""

    def __init__(self, code: str, message: str, status: int = 0, retry_after: float = 0):
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status
        # Seconds the server asked to wait (429, 503), or the client holds back (backing_off).
        self.retry_after = retry_after

    def __str__(self) -> str:
        return f"keyhouse: {self.message} (HTTP {self.status})" if self.status else f"keyhouse: {self.message}"


# The server's error texts with a code of their own; a text ending in ": " is a prefix.
_ERROR_TABLE = [
    (404, "License key not found", "license_not_found"),
    (403, "License has expired", "license_expired"),
    (403, "License is expired", "license_expired"),
    (403, "License is not active", "license_not_active"),
    (403, "Activation limit exceeded for this license key", "activation_limit_exceeded"),
    (403, "Invalid activation token", "invalid_activation_token"),
    (403, "Metric not allowed: ", "metric_not_allowed"),
    (403, "Usage limit exceeded for metric: ", "usage_limit_exceeded"),
    (403, "Seat lease has expired", "seat_lease_expired"),
    (403, "Machine fingerprint does not match", "fingerprint_mismatch"),
    (400, "components are required by this product's policy", "components_required"),
    (404, "Release not found", "release_not_found"),
    (403, "Tenant is suspended", "tenant_suspended"),
]


def error_code(status: int, message: str) -> str:
    """The code of an answer of the server."""
    for s, m, c in _ERROR_TABLE:
        if s == status and (message == m or (m.endswith(": ") and message.startswith(m))):
            return c
    if status in (400, 413):
        return "invalid_request"
    if status == 404:
        return "not_found"
    if status == 429:
        return "rate_limited"
    if status == 503:
        return "unavailable"
    if status >= 500:
        return "server_error"
    return f"http_{status}"


def hash_component(product_id: str, raw: str) -> str:
    """The value sent for one machine component: hex HMAC-SHA256 keyed with the product id
    over the trimmed raw value (no cross-vendor identifier leaves the machine)."""
    return hmac.new(product_id.encode(), raw.strip().encode(), hashlib.sha256).hexdigest()


def _read_trim(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read().strip()
    except OSError:
        return ""


def in_container() -> bool:
    """Whether this process runs in a container (Docker, Podman, Kubernetes, containerd)."""
    if os.path.exists("/.dockerenv") or os.path.exists("/run/.containerenv"):
        return True
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        return True
    return bool(re.search(r"docker|kubepods|containerd|libpod", _read_trim("/proc/1/cgroup")))


def _root_disk_id() -> str:
    source = ""
    for line in _read_trim("/proc/self/mountinfo").splitlines():
        f = line.split(" ")
        if len(f) > 4 and f[4] == "/" and "-" in f:
            i = f.index("-")
            if i + 2 < len(f):
                source = f[i + 2]
    if not source:
        return ""
    try:
        for name in os.listdir("/dev/disk/by-uuid"):
            if os.path.realpath(os.path.join("/dev/disk/by-uuid", name)) == source:
                return name
    except OSError:
        pass
    return ""


def _install_id(path: str) -> str:
    existing = _read_trim(path)
    if existing:
        return existing
    fresh = secrets.token_hex(16)
    try:
        write_file_atomic(path, fresh + "\n")
        return fresh
    except OSError:
        return ""


def _run(argv: List[str]) -> str:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def machine_components(product_id: str, container: bool = False, install_id_path: Optional[str] = None) -> Dict[str, str]:
    """This machine's components, each hashed with product_id: Linux machine_id, dmi_uuid,
    root_disk; macOS platform_uuid; Windows machine_guid. In a container (detected, or
    container=True) the image's machine id is not this machine's: the components are the
    install id kept at install_id_path (on a volume) plus the host identity it can read."""
    raw: Dict[str, str] = {}
    if sys.platform.startswith("linux"):
        in_ctr = container or in_container()
        if not in_ctr:
            raw["machine_id"] = _read_trim("/etc/machine-id")
        raw["dmi_uuid"] = _read_trim("/sys/class/dmi/id/product_uuid")
        if not in_ctr:
            raw["root_disk"] = _root_disk_id()
        if in_ctr and install_id_path:
            raw["install_id"] = _install_id(install_id_path)
    elif sys.platform == "darwin":
        m = re.search(r'"IOPlatformUUID" = "([^"]+)"', _run(["ioreg", "-rd1", "-c", "IOPlatformExpertDevice"]))
        if m:
            raw["platform_uuid"] = m.group(1)
    elif sys.platform == "win32":
        m = re.search(r"MachineGuid\s+REG_SZ\s+(\S+)", _run(["reg", "query", r"HKLM\SOFTWARE\Microsoft\Cryptography", "/v", "MachineGuid"]))
        if m:
            raw["machine_guid"] = m.group(1)
    return {name: hash_component(product_id, v) for name, v in raw.items() if v}


# The components an instance id is derived from, most stable first: the OS's own machine
# id, then the container's install id, then hardware.
_INSTANCE_ID_SOURCES = ("machine_id", "platform_uuid", "machine_guid", "install_id", "dmi_uuid", "root_disk", "hostname")


def instance_id(components: Dict[str, str]) -> str:
    """A stable instance id for a machine with these (hashed) components: "m-" and 32 hex
    digits of SHA-256 over the first of machine_id, platform_uuid, machine_guid, install_id,
    dmi_uuid, root_disk, hostname it has (else its first component by name). Hashed again,
    so no raw identifier is sent; "" with no component (Client.instance_id() then uses the
    host name)."""
    value = next((components[n] for n in _INSTANCE_ID_SOURCES if components.get(n)), None)
    if not value:
        names = sorted(n for n, v in components.items() if v)
        if not names:
            return ""
        value = components[names[0]]
    return "m-" + hashlib.sha256(("keyhouse instance id\0" + value).encode()).hexdigest()[:32]


def write_file_atomic(path: str, data: str) -> None:
    """Writes a file atomically: a temporary file in the same folder, synced, renamed over it, mode 0600."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, mode=0o700, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _stringify(value: Any) -> bytes:
    """JSON as JavaScript's JSON.stringify writes it (the signed bytes)."""
    return _js_json(value).encode("utf-8")


def _js_json(value: Any) -> str:
    # json.dumps writes strings as JSON.stringify does, but not numbers (1e-05, 1e+16, 1.0).
    if isinstance(value, dict):
        return "{" + ",".join(_js_json(str(k)) + ":" + _js_json(v) for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_js_json(v) for v in value) + "]"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return _js_number(value)
    return json.dumps(value, ensure_ascii=False)


def _js_number(x: Union[int, float]) -> str:
    """ECMAScript's Number::toString(10) of x read as a double, as JSON.stringify writes it:
    the shortest digits that round-trip (repr's), plainly written when the decimal exponent
    n is -6 < n <= 21, else as 1e-7, 1.5e+300; -0 as 0; NaN, infinities as null."""
    try:
        f = float(x)  # an int beyond 2^53 rounds as JSON.parse rounds it
    except OverflowError:
        return "null"
    if f != f or f in (float("inf"), float("-inf")):
        return "null"
    if f == 0:
        return "0"
    sign = "-" if f < 0 else ""
    mantissa, _, exponent = f"{abs(f)!r}".partition("e")  # repr: the shortest round-trip digits
    whole, _, fraction = mantissa.partition(".")
    digits = (whole + fraction).lstrip("0")
    n = len(whole) + int(exponent or 0) - (len(whole + fraction) - len(digits))  # value = 0.digits x 10^n
    digits = digits.rstrip("0")
    k = len(digits)
    if k <= n <= 21:
        return sign + digits + "0" * (n - k)
    if 0 < n <= 21:
        return sign + digits[:n] + "." + digits[n:]
    if -6 < n <= 0:
        return sign + "0." + "0" * -n + digits
    e = n - 1
    return sign + digits[0] + ("." + digits[1:] if k > 1 else "") + "e" + ("+" if e >= 0 else "-") + str(abs(e))


def _verify_rsa(public_key_pem: Union[str, Sequence[str]], signed: bytes, signature: Any) -> bool:
    """True when any of the keys verifies the signature: during a planned key rotation an app
    holds the current and the next key (GET /v1/public-keys), and either may have signed."""
    if not isinstance(signature, str):
        return False
    for pem in [public_key_pem] if isinstance(public_key_pem, str) else public_key_pem:
        try:
            key = serialization.load_pem_public_key(pem.encode())
            key.verify(base64.b64decode(signature, validate=True), signed, padding.PKCS1v15(), hashes.SHA256())
            return True
        except (InvalidSignature, ValueError, TypeError):
            continue
    return False


def _parse_time(s: str) -> datetime:
    return datetime.fromisoformat(s.replace("Z", "+00:00"))


def verify_offline_export(export_json: str, public_key_pem: Union[str, Sequence[str]], now: Optional[float] = None) -> Dict[str, Any]:
    """Checks an offline export (GET /v1/export-license/{key}/offline) with the server's RSA
    public key (or any of several: the keys GET /v1/public-keys lists) and no network, then
    its expiry; returns the license object. Raises
    KeyhouseError invalid_signature or expired."""
    try:
        doc = json.loads(export_json)
    except ValueError:
        raise KeyhouseError("invalid_signature", "not an offline export") from None
    lic = doc.get("license") if isinstance(doc, dict) else None
    # Parsed dicts keep the server's field order: re-serialized they are the signed bytes.
    if not isinstance(lic, dict) or not _verify_rsa(public_key_pem, _stringify(lic), doc.get("signature")):
        raise KeyhouseError("invalid_signature", "offline export signature does not verify")
    now = time.time() if now is None else now
    if lic.get("expires_at") and _parse_time(lic["expires_at"]).timestamp() <= now:
        raise KeyhouseError("expired", f"license expired at {lic['expires_at']}")
    return lic


MANIFEST_SKEW_SECONDS = 300
_SIGNED_MANIFEST_FIELDS = ("product_id", "version", "channel", "platform", "artifact_url", "checksum", "release_notes", "issued_at")


def verify_manifest(release: Dict[str, Any], request: Dict[str, str], public_key_pem: Union[str, Sequence[str]],
                    now: Optional[float] = None, max_age: float = MANIFEST_SKEW_SECONDS) -> None:
    """Checks a release manifest before it is believed: the signature (by the key, or any of
    several keys given) over its fields in the signed order, that it answers the request, and that it was issued at most max_age
    seconds ago (a signed manifest stays valid after unpublish; the age stops replays).
    Raises KeyhouseError invalid_signature, manifest_mismatch or manifest_too_old."""
    signed = {f: release.get(f) for f in _SIGNED_MANIFEST_FIELDS}
    if not _verify_rsa(public_key_pem, _stringify(signed), release.get("signature")):
        raise KeyhouseError("invalid_signature", "release manifest signature does not verify")
    if (release["product_id"].strip().lower() != request["product_id"].strip().lower()
            or release["channel"] != request["channel"] or release["platform"] != request["platform"]):
        raise KeyhouseError("manifest_mismatch", "release manifest answers another product, channel or platform")
    now = time.time() if now is None else now
    try:
        age = now - _parse_time(release["issued_at"]).timestamp()
    except ValueError:
        raise KeyhouseError("manifest_too_old", "release manifest has no valid issued_at") from None
    if not (-MANIFEST_SKEW_SECONDS <= age <= max_age):
        raise KeyhouseError("manifest_too_old", f"release manifest issued at {release['issued_at']} is outside its maximum age")


CLOCK_TOLERANCE_SECONDS = 300


class LeaseError(KeyhouseError):
    """Raised by verify_lease; `claims` are set when the signature verified."""

    def __init__(self, code: str, message: str, claims: Optional[Dict[str, Any]] = None, unknown_kid: bool = False):
        super().__init__(code, message)
        self.claims = claims
        self.unknown_kid = unknown_kid


def _b64url(s: str) -> bytes:
    if not re.fullmatch(r"[A-Za-z0-9_-]*", s):
        raise ValueError("not base64url")
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


# Starts the nonce the SDKs send with every lease request: the local clock at the request,
# in Unix seconds. The server signs it into the lease, so the lease itself says how far this
# machine's clock was from the server's when it was asked for (lease_clock_offset), and an
# edited store cannot change that.
CLOCK_NONCE_PREFIX = "local-time:"


def lease_clock_offset(claims: Dict[str, Any]) -> int:
    """How far (seconds) the server's clock was ahead of this machine's when the lease was
    asked for: its iat less the local time the SDK's nonce carries (negative when the local
    clock is ahead; 0 for a lease without that nonce). The lease's times are the server's:
    its renew_after and exp are judged on the local clock plus this offset, so a machine
    whose clock is wrong is neither renewing all the time nor unlicensed online."""
    nonce = claims.get("nonce") or ""
    asked = nonce[len(CLOCK_NONCE_PREFIX):]
    if not nonce.startswith(CLOCK_NONCE_PREFIX) or not re.fullmatch(r"-?[0-9]+", asked):
        return 0
    return claims["iat"] - int(asked)


def _clock_behind(now: float, iat: int, newest_iat: Optional[int]) -> bool:
    """The clock is more than CLOCK_TOLERANCE_SECONDS behind the lease's iat or the newest
    iat seen (the server's clock)."""
    return iat > now + CLOCK_TOLERANCE_SECONDS or (newest_iat or 0) > now + CLOCK_TOLERANCE_SECONDS


def verify_lease(token: str, keys: Dict[str, Any], product_id: str, now: float, components: Dict[str, str],
                 license_key: Optional[str] = None, newest_iat_seen: Optional[int] = None) -> Dict[str, Any]:
    """Checks a lease (a JWS signed with Ed25519) and returns its claims, or raises LeaseError
    whose code is the verdict: invalid_lease, wrong_product, wrong_license, clock_tampered,
    expired, machine_mismatch.

    exp is judged on the lease's clock: now plus lease_clock_offset. The offset only
    corrects a clock that was already wrong when the lease was asked for: it cannot lengthen
    a lease, because a clock moved back after the request moves the lease's clock back as
    well, and more than CLOCK_TOLERANCE_SECONDS below the request is clock_tampered like a
    clock behind the server's (iat, or the newest iat seen, more than the tolerance ahead of
    the local clock)."""
    parts = token.split(".") if isinstance(token, str) else []
    if len(parts) != 3:
        raise LeaseError("invalid_lease", "lease is not a JWS")
    try:
        header = json.loads(_b64url(parts[0]))
        sig = _b64url(parts[2])
    except ValueError:
        raise LeaseError("invalid_lease", "lease is not a JWS") from None
    if not isinstance(header, dict) or header.get("alg") != "EdDSA":
        raise LeaseError("invalid_lease", "lease is not signed with EdDSA")
    jwk = next((k for k in keys.get("keys", []) if k.get("kid") == header.get("kid") and k.get("kty") == "OKP" and k.get("crv") == "Ed25519"), None)
    if jwk is None:
        raise LeaseError("invalid_lease", f"lease signed by unknown key {header.get('kid')}", unknown_kid=True)
    try:
        Ed25519PublicKey.from_public_bytes(_b64url(jwk["x"])).verify(sig, f"{parts[0]}.{parts[1]}".encode())
        claims = json.loads(_b64url(parts[1]))
    except (InvalidSignature, ValueError):
        raise LeaseError("invalid_lease", "lease signature does not verify") from None
    if claims.get("aud") != product_id:
        raise LeaseError("wrong_product", "lease is for another product", claims)
    if license_key and claims.get("sub") != license_key:
        raise LeaseError("wrong_license", "lease is for another license", claims)
    lease_now = now + lease_clock_offset(claims)
    if _clock_behind(now, claims["iat"], newest_iat_seen):
        raise LeaseError("clock_tampered", "the local clock is behind the lease's issue time", claims)
    if _clock_behind(lease_now, claims["iat"], newest_iat_seen):
        raise LeaseError("clock_tampered", "the local clock moved back since the lease was asked for", claims)
    if lease_now >= claims["exp"]:
        raise LeaseError("expired", "lease expired", claims)
    # A bound lease needs one of its components equal here (the server applies the
    # policy's stricter rule at every renewal).
    bound = claims.get("components") or {}
    if bound and not any(components.get(name) == v for name, v in bound.items()):
        raise LeaseError("machine_mismatch", "lease is bound to another machine", claims)
    return claims


def _lease_floats(lease: Optional[str]) -> bool:
    """The stored lease (verified when it was stored) is of a floating seat."""
    try:
        return json.loads(_b64url((lease or "").split(".")[1])).get("floating") is True
    except (ValueError, IndexError, AttributeError):
        return False


def _unverified_tenant(lease: str) -> str:
    """The tenant_id claim of a lease whose signature is not checked yet ("" if none)."""
    try:
        claims = json.loads(_b64url(lease.split(".")[1]))
    except (ValueError, IndexError):
        return ""
    tenant = claims.get("tenant_id") if isinstance(claims, dict) else None
    return tenant if isinstance(tenant, str) else ""


class FileStore:
    """Stores the client's state in one file, replaced atomically, mode 0600."""

    def __init__(self, path: str):
        self.path = path

    def load(self) -> Optional[str]:
        try:
            with open(self.path, encoding="utf-8") as f:
                return f.read()
        except OSError:
            return None

    def save(self, data: str) -> None:
        write_file_atomic(self.path, data)


@dataclass
class Verdict:
    """The answer of check(). reason is "licensed", or why not: not_activated,
    license_not_found, license_not_active (revoked), license_expired, seat_lapsed,
    machine_mismatch, expired (the lease ran out and the server could not be reached),
    unreachable (no lease yet and no server), invalid_lease, lease_keys_unavailable (the
    lease's key is not pinned and GET /v1/lease-keys could not be fetched), wrong_product,
    wrong_license, clock_tampered, components_required, tenant_suspended (a hosted server
    answered 403 Tenant is suspended, and the lease ran out or there is none; the lease is
    kept and answers licensed until its exp)."""
    licensed: bool
    reason: str
    offline: bool = False
    tier: Optional[str] = None
    entitlements: List[str] = field(default_factory=list)
    limits: Dict[str, float] = field(default_factory=dict)
    floating: bool = False
    lease_expires_at: Optional[float] = None
    renew_after: Optional[float] = None
    license_expires_at: Optional[float] = None

    @classmethod
    def of(cls, claims: Dict[str, Any], offline: bool) -> "Verdict":
        # The lease's exp and renew_after on this machine's clock (the server's times less
        # the lease's clock offset), so an app that schedules its own checks by them keeps
        # to the server's timing whatever the clock.
        offset = lease_clock_offset(claims)
        return cls(True, "licensed", offline, claims.get("tier"), claims.get("entitlements") or [], claims.get("limits") or {},
                   bool(claims.get("floating")), claims["exp"] - offset, claims["renew_after"] - offset,
                   claims.get("license_expires_at"))


# Failure backoff: after the n-th failure in a row (no answer, 429, 5xx) nothing is sent for
# max(Retry-After, 60 s, a draw in [0, min(30 min, 60 s * 2^(n-1))]). A 403 Tenant is
# suspended (a hosted server whose operator suspended the vendor's account) is paced apart,
# at the refusals' pace: nothing for max(Retry-After, 60 s) after it, one probe at a time,
# with no growth, so an app whose lease ran out meanwhile is licensed within a minute of the
# suspension being lifted.
MIN_FAILING_INTERVAL_SECONDS = 60
MAX_BACKOFF_SECONDS = 1800


def _refusal_due(now: int, refused_at: int) -> bool:
    """A stored refusal last asked about at refused_at (Unix seconds) is asked about again
    now, MIN_FAILING_INTERVAL_SECONDS later, or at once when the clock moved back below it
    (a refusal stored under a clock that ran ahead would otherwise stand until it is
    reached)."""
    since = now - refused_at
    return since < 0 or since >= MIN_FAILING_INTERVAL_SECONDS

# How many times track_usage sends one increment again after no answer or a 5xx, with the
# same Idempotency-Key, waiting USAGE_RETRY_DELAY_SECONDS * 2^i (with jitter) before the i-th.
USAGE_RETRIES = 2
USAGE_RETRY_DELAY_SECONDS = 0.25


class Client:
    """One license on this machine, against one server. Thread-safe."""

    def __init__(self, url: str, product_id: str, key: str, public_key_pem: Optional[str] = None,
                 lease_keys: Optional[Dict[str, Any]] = None, no_key_refresh: bool = False, tenant_id: Optional[str] = None,
                 store_path: Optional[str] = None, store: Any = None, components: Optional[Dict[str, str]] = None,
                 request_timeout: float = 10.0, logger: Optional[Callable[[str], None]] = None,
                 now: Optional[Callable[[], float]] = None, on_lapsed: Optional[Callable[[Verdict], None]] = None,
                 rand: Optional[Callable[[], float]] = None, public_key_pems: Optional[Sequence[str]] = None):
        if not url or not product_id or not key:
            raise ValueError("keyhouse: url, product_id and key are required")
        self.url = url.rstrip("/")
        self.product_id = product_id
        self._key = key
        self.public_key_pem = public_key_pem
        # More RSA public keys accepted as well: ship every key GET /v1/public-keys lists (the
        # current and, during a planned rotation, the next one), so that the app keeps
        # verifying manifests and offline exports after the server promotes the next key.
        self.public_key_pems = list(public_key_pems or [])
        self.no_key_refresh = no_key_refresh
        self.tenant_id = tenant_id
        self.request_timeout = request_timeout
        self._logger = logger
        self._now = now or time.time
        self._rand = rand or random.random
        self.on_lapsed = on_lapsed
        path = store_path or os.path.join(os.path.expanduser("~"), ".config", "keyhouse", re.sub(r"[^A-Za-z0-9._-]", "_", product_id) + ".json")
        self._store = store or FileStore(path)
        self.components = components if components is not None else machine_components(product_id, install_id_path=None if store else path + ".install-id")
        self._keys: Dict[str, Any] = {"keys": list((lease_keys or {}).get("keys", []))}
        self._lock = threading.RLock()
        self._failures = 0
        # The last answer was a suspension: one probe at a time.
        self._paced = False
        self._next_attempt = 0.0
        self._renewal: Optional[threading.Thread] = None
        self._stop = threading.Event()
        self._heartbeat: Optional[threading.Thread] = None
        # The heartbeat's timer, which close() ends (the live tests move their clock instead).
        self._heartbeat_wait: Callable[[float], Any] = self._stop.wait
        # The floating lease whose lapse on_lapsed was told of.
        self._lapse_reported: Optional[str] = None
        self._state: Dict[str, Any] = {"key": key}
        stored = self._store.load()
        if stored:
            try:
                s = json.loads(stored)
                self._state = s if s.get("key") == key else {"key": key, "newest_iat": s.get("newest_iat")}
            except ValueError:
                pass
        if self._state.get("lease_keys"):
            self._merge_keys(self._state["lease_keys"])
        # The state's suspended_at is when the server last answered 403 Tenant is suspended
        # (Unix seconds, local clock). The stored lease is kept; until another answer of the
        # server, a lease past its exp, or none, answers tenant_suspended, and the client sends
        # nothing for a minute after it: a restarted app keeps the pace.
        suspended_at = self._state.get("suspended_at")
        if suspended_at and suspended_at <= self._now() < suspended_at + MIN_FAILING_INTERVAL_SECONDS:
            self._paced = True
            self._next_attempt = suspended_at + MIN_FAILING_INTERVAL_SECONDS

    def _log(self, line: str) -> None:
        if self._logger:
            self._logger("keyhouse: " + line)

    def _save(self) -> None:
        self._store.save(json.dumps(self._state))

    def _merge_keys(self, keyset: Dict[str, Any]) -> None:
        have = {k.get("kid") for k in self._keys["keys"]}
        self._keys["keys"].extend(k for k in keyset.get("keys", []) if k.get("kid") not in have)

    def _record_suspension(self, retry_after: float) -> None:
        """The server works and refuses the vendor's account: the refusals' pace, a minute (or
        the server's Retry-After), with no growth; a run of failures ends here. The time is
        kept in the store."""
        now = self._now()
        self._failures, self._paced = 0, True
        self._next_attempt = now + max(MIN_FAILING_INTERVAL_SECONDS, retry_after)
        if self._state.get("suspended_at") != int(now):
            self._state["suspended_at"] = int(now)
            self._save()

    def _record_answer(self) -> None:
        """An answer of the server other than a suspension: the backoff and the suspension end."""
        self._failures, self._paced, self._next_attempt = 0, False, 0.0
        if self._state.pop("suspended_at", None) is not None:
            self._save()

    def _record_failure(self, retry_after: float) -> None:
        self._failures += 1
        ceiling = min(MAX_BACKOFF_SECONDS, MIN_FAILING_INTERVAL_SECONDS * 2 ** min(self._failures - 1, 10))
        self._next_attempt = self._now() + max(self._rand() * ceiling, MIN_FAILING_INTERVAL_SECONDS, retry_after)

    def _retry_after(self, value: Optional[str]) -> float:
        if not value:
            return 0
        if value.strip().isdigit():
            return float(value.strip())
        try:
            return max(0.0, parsedate_to_datetime(value).timestamp() - self._now())
        except (TypeError, ValueError):
            return 0

    def _request(self, method: str, route: str, body: Any = None, extra_headers: Optional[Dict[str, str]] = None,
                 gated: bool = True) -> Any:
        """Sends one JSON request; returns the 200 body. gated=False skips the failure
        backoff's admission, for the bounded retries of one track-usage increment (their
        failures are still recorded)."""
        with self._lock:
            now = self._now()
            if gated and now < self._next_attempt:
                wait = self._next_attempt - now
                why = "tenant suspended" if self._paced and not self._failures else "server failing"
                raise KeyhouseError("backing_off", f"{why}; next request in {wait:.0f}s", 0, wait)
            # One probe at a time while failing or suspended: the others wait for its answer.
            if gated and (self._failures or self._paced):
                self._next_attempt = now + MIN_FAILING_INTERVAL_SECONDS
        data = None if body is None else json.dumps(body).encode()
        headers = {"Accept": "application/json", **(extra_headers or {})}
        if data is not None:
            headers["Content-Type"] = "application/json"
        req = urllib.request.Request(self.url + route, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=self.request_timeout) as resp:
                status, text, retry = resp.status, resp.read(4 << 20), resp.headers.get("Retry-After")
        except urllib.error.HTTPError as e:
            status, text, retry = e.code, e.read(4 << 20), e.headers.get("Retry-After")
        except (urllib.error.URLError, OSError, ValueError) as e:
            with self._lock:
                self._record_failure(0)
            self._log(f"no answer on {route}: {type(e).__name__}")
            raise KeyhouseError("unreachable", "server unreachable") from None
        retry_after = self._retry_after(retry)
        try:
            parsed = json.loads(text)
        except ValueError:
            parsed = None
        message = code = ""
        if status != 200:
            message = parsed.get("error") if isinstance(parsed, dict) and isinstance(parsed.get("error"), str) else f"HTTP {status}"
            code = error_code(status, message)
        with self._lock:
            if status == 429 or status >= 500:
                self._record_failure(retry_after)
            elif code == "tenant_suspended":
                self._record_suspension(retry_after)
            else:
                self._record_answer()
        if status != 200:
            self._log(f"{route} refused: {status} {code}")
            raise KeyhouseError(code, message, status, retry_after)
        if parsed is None:
            raise KeyhouseError("server_error", "answer is not JSON", 200)
        return parsed

    def verify(self) -> Dict[str, Any]:
        """POST /v1/verify-license; an invalid license raises (license_not_found, license_expired, license_not_active)."""
        return self._request("POST", "/v1/verify-license", {"key": self._key})

    def validate(self) -> bool:
        """POST /v1/validate-license for this machine's seat."""
        if not self._state.get("instance_id"):
            raise KeyhouseError("not_activated", "not activated on this machine")
        return bool(self._request("POST", "/v1/validate-license", {"key": self._key, "instance_id": self._state["instance_id"]})["valid"])

    def instance_id(self) -> str:
        """This machine's instance id for activate(): instance_id() of the client's
        components, or, with none, of the host name hashed with the product id. Stable
        across runs and reinstalls, different on another machine, never a raw identifier."""
        return instance_id(self.components) or instance_id({"hostname": hash_component(self.product_id, socket.gethostname())})

    def activate(self, instance_id: str) -> Dict[str, Any]:
        """Takes a seat for instance_id (POST /v1/activate-license; client.instance_id() gives
        this machine's) and stores its token. When the seat exists but the store holds no
        token for it (a reinstall), a seat bound to this machine is proven by its components
        and gets a new token (POST /v1/leases with instance_id, docs/leases.md "Reinstall");
        an unbound one raises invalid_activation_token: release it (the customer portal) and
        activate again. Before taking a seat it asks verify-license for the license's
        product: a license of another product raises wrong_product and takes no seat."""
        held = self._state.get("instance_id") == instance_id and bool(self._state.get("token"))
        if not held:
            # A license of another product would take a seat whose leases this app refuses
            # (wrong_product): refuse it here, before a seat is taken.
            if self.verify().get("product_id") != self.product_id:
                raise KeyhouseError("wrong_product", "the license is for another product than this app's; no seat was taken")
        r = self._request("POST", "/v1/activate-license", {"key": self._key, "instance_id": instance_id})
        token, lease = r.get("token"), None
        if not token and not held:
            token, lease = self._reinstall(instance_id)
        with self._lock:
            if token or self._state.get("instance_id") != instance_id:
                self._state = {"key": self._key, "instance_id": instance_id, "token": token, "lease": lease,
                               "newest_iat": self._state.get("newest_iat"), "lease_keys": self._state.get("lease_keys"),
                               "tenant_id": self._state.get("tenant_id")}
            self._save()
        return {"already_activated": bool(r.get("alreadyActivated")), "instance_id": instance_id}

    def _reinstall(self, instance_id: str):
        """A new token for an existing seat bound to this machine. The lease that comes with
        it is stored unverified: check() verifies a stored lease before believing it."""
        try:
            r = self._request("POST", "/v1/leases", {"key": self._key, "instance_id": instance_id, "components": self.components})
        except KeyhouseError as e:
            if e.code == "invalid_activation_token":
                raise KeyhouseError(e.code, "the seat of this instance id exists but its token was lost, and the seat is not "
                                    "bound to this machine: release the seat and activate again", e.status) from None
            raise
        if not r.get("token"):
            raise KeyhouseError("server_error", "the reinstall answer has no token", 200)
        return r["token"], r.get("lease")

    def _token(self) -> str:
        token = self._state.get("token")
        if not token:
            raise KeyhouseError("not_activated", "not activated on this machine")
        return token

    def deactivate(self) -> bool:
        """Frees this machine's seat and forgets its token and lease; returns whether one was freed."""
        r = self._request("POST", "/v1/deactivate-license", {"key": self._key, "token": self._token()})
        with self._lock:
            self._state = {"key": self._key, "newest_iat": self._state.get("newest_iat"), "lease_keys": self._state.get("lease_keys"),
                           "tenant_id": self._state.get("tenant_id")}
            self._save()
        return bool(r["deactivated"])

    def track_usage(self, metric: str, n: int = 1, idempotency_key: Optional[str] = None) -> int:
        """Adds n to a metric of this seat; returns the new running total. Each call is one
        logical increment with one Idempotency-Key (a fresh one, or idempotency_key, for an
        app that retries an increment later): no answer or a 5xx is retried USAGE_RETRIES
        times with that key, so an increment whose answer was lost counts once."""
        body = {"key": self._key, "token": self._token(), "metric": metric, "increment": n}
        headers = {"Idempotency-Key": idempotency_key or "usage-" + secrets.token_hex(16)}
        attempt = 0
        while True:
            try:
                return self._request("POST", "/v1/track-usage", body, headers, gated=attempt == 0)["usage"]
            except KeyhouseError as e:
                if not (e.code == "unreachable" or e.status >= 500) or attempt == USAGE_RETRIES:
                    raise
            time.sleep(USAGE_RETRY_DELAY_SECONDS * 2 ** attempt * (0.5 + self._rand()))
            attempt += 1

    def usage_report(self) -> Dict[str, Any]:
        """POST /v1/usage-report."""
        return self._request("POST", "/v1/usage-report", {"key": self._key})

    def check_update(self, current_version: str, channel: str = "stable", platform: str = "") -> Optional[Dict[str, Any]]:
        """Asks for a release newer than current_version; None when there is none, and a
        release only after verify_manifest accepted it."""
        keys = self._pinned_public_keys()
        if not keys:
            raise ValueError("keyhouse: check_update needs public_key_pem")
        # The server answers "" as the stable channel, so the manifest names stable: ask for
        # stable, so that the question compared with the manifest is the one answered.
        request = {"product_id": self.product_id, "channel": channel or "stable", "platform": platform}
        r = self._request("POST", "/v1/check-update", {"key": self._key, **request, "current_version": current_version})
        if not r.get("update_available") or not r.get("release"):
            return None
        verify_manifest(r["release"], request, keys, self._now())
        return r["release"]

    def verify_offline_export(self, export_json: str) -> Dict[str, Any]:
        """Checks an offline export with the pinned public keys at the client's clock."""
        keys = self._pinned_public_keys()
        if not keys:
            raise ValueError("keyhouse: verify_offline_export needs public_key_pem")
        return verify_offline_export(export_json, keys, self._now())

    def _pinned_public_keys(self) -> List[str]:
        """public_key_pem and public_key_pems, the RSA keys the app accepts."""
        return [k for k in [self.public_key_pem or "", *self.public_key_pems] if k]

    def _check_lease(self, lease: str) -> Dict[str, Any]:
        kwargs = dict(product_id=self.product_id, now=self._now(), components=self.components, license_key=self._key,
                      newest_iat_seen=self._state.get("newest_iat"))
        try:
            return verify_lease(lease, self._keys, **kwargs)
        except LeaseError as e:
            if not e.unknown_kid or self.no_key_refresh:
                raise
        # Hosted, the key set is the tenant's: pinned (tenant_id), else the one a lease
        # verified for before, else the one this lease names. The named tenant is not yet
        # trusted: it only chooses which of this server's key sets is fetched, the lease must
        # still verify against one of that tenant's keys, and its product and license are
        # checked after that (a product belongs to one tenant).
        learned = self._state.get("tenant_id")
        tenant = self.tenant_id or learned or _unverified_tenant(lease)
        route = "/v1/lease-keys" + (f"?tenant_id={urllib.parse.quote(tenant, safe='')}" if tenant else "")
        try:
            fetched = self._request("GET", route)
        except KeyhouseError as fetch_err:
            raise LeaseError("lease_keys_unavailable",
                             f"the lease's signing key is not pinned and the key set could not be fetched: {fetch_err.message}") from None
        with self._lock:
            self._merge_keys(fetched)
            self._state["lease_keys"] = fetched
            self._save()
        claims = verify_lease(lease, self._keys, **kwargs)
        if not self.tenant_id and not learned and tenant:
            with self._lock:
                self._state["tenant_id"] = tenant
                self._save()
        return claims

    def check(self) -> Verdict:
        """Whether the app is licensed, offline first: a valid stored lease answers at once
        (past its renew_after it is renewed in a background thread: wait_renewal()); without
        one, or with one that ran out, the server is asked for a lease. While the server
        cannot be reached a stored lease is good until its exp; a refusal of the server
        (revoked, expired, seat lapsed) stands from the first renewal that reaches it, and out
        of reach; a refused license is asked about again at most once per
        MIN_FAILING_INTERVAL_SECONDS (the checks in between answer the refusal with no
        request), so one reinstated or extended is licensed at the first check online a
        minute after the last ask. A hosted server that answers 403 Tenant is suspended (its
        operator suspended the vendor's account) is a server that cannot be reached for the
        license: the lease is kept and good until its exp, then tenant_suspended, and the
        server is asked at most once a minute."""
        if not self._state.get("token"):
            return Verdict(False, "not_activated")
        with self._lock:
            refusal = self._state.get("refusal")
            now = int(self._now())
            ask = bool(refusal) and _refusal_due(now, self._state.get("refused_at") or 0)
            if ask:
                # This check is the ask of this minute: checks running beside it answer the
                # refusal.
                self._state["refused_at"] = now
                self._save()
        if refusal:
            # The server refused the license at a renewal (revoked, deleted, past its
            # expiry): it is asked again once a minute, so a license reinstated or extended
            # is licensed then; in between, and out of reach, the refusal stands.
            if not ask:
                return Verdict(False, refusal)
            return self.renew()
        lease = self._state.get("lease")
        if lease:
            try:
                v = Verdict.of(self._check_lease(lease), True)
                if self._now() >= v.renew_after:
                    self._renew_in_background()
                return v
            except KeyhouseError as e:
                claims = getattr(e, "claims", None)
                moved_back = e.code == "clock_tampered" and claims is not None and \
                    not _clock_behind(self._now(), claims["iat"], self._state.get("newest_iat"))
                if e.code != "expired" and not moved_back:
                    return Verdict(False, e.code)
                # The lease ran out, or the clock moved back since it was asked for but is
                # not behind the server's: a lease asked for now measures the clock anew (out
                # of reach, the stored lease answers as before).
        return self.renew()

    def _renew_in_background(self) -> None:
        with self._lock:
            if self._renewal and self._renewal.is_alive():
                return
            self._renewal = threading.Thread(target=self.renew, daemon=True)
            self._renewal.start()

    def wait_renewal(self) -> None:
        """Waits for a background renewal started by check(), if one runs."""
        t = self._renewal
        if t:
            t.join()

    def renew(self) -> Verdict:
        """Asks the server for a new lease now (POST /v1/leases); returns the verdict."""
        token = self._state.get("token")
        if not token:
            return Verdict(False, "not_activated")
        asked = int(self._now())
        try:
            nonce = CLOCK_NONCE_PREFIX + str(asked)
            lease = self._request("POST", "/v1/leases", {"key": self._key, "token": token, "components": self.components,
                                                         "nonce": nonce})["lease"]
        except KeyhouseError as e:
            if e.status == 0 or e.status == 429 or e.status >= 500 or e.code == "tenant_suspended":
                # No answer for the license: the server failed, or it refuses the vendor's
                # account (a suspension is not the customer's license). The stored lease and
                # token are kept, as out of reach; the suspension, when the server said so, is
                # in the state now.
                return self._offline_verdict()
            reason = {"seat_lease_expired": "seat_lapsed", "invalid_activation_token": "not_activated",
                      "fingerprint_mismatch": "machine_mismatch"}.get(e.code, e.code)
            if e.code == "invalid_activation_token" and _lease_floats(self._state.get("lease")):
                # The floating seat this client held is gone: released by another copy of the
                # app sharing its store and instance id, or in the portal. For the app it is a
                # lapse like any other: reported, and activate takes a seat again.
                reason = "seat_lapsed"
            with self._lock:
                lapsed_lease = self._state.pop("lease", None)
                self._state.pop("refusal", None)
                self._state.pop("refused_at", None)
                if e.code in ("license_not_found", "license_not_active", "license_expired"):
                    self._state["refusal"] = reason
                    self._state["refused_at"] = asked
                if e.code in ("seat_lease_expired", "invalid_activation_token"):
                    self._state.pop("token", None)
                self._save()
            self._log(f"not licensed: {reason}")
            v = Verdict(False, reason)
            if reason == "seat_lapsed":
                self._report_lapse(lapsed_lease, v)
            return v
        try:
            claims = self._check_lease(lease)
        except KeyhouseError as e:
            if e.code == "clock_tampered" and getattr(e, "claims", None):
                # A genuine lease, refused only because this clock is behind the server's:
                # kept, so later checks answer clock_tampered from it without asking again,
                # and licensed once the clock is right.
                with self._lock:
                    self._state["lease"] = lease
                    self._state["newest_iat"] = max(self._state.get("newest_iat") or 0, e.claims["iat"])
                    self._state.pop("refusal", None)
                    self._state.pop("refused_at", None)
                    self._save()
            return Verdict(False, e.code)
        with self._lock:
            self._state["lease"] = lease
            self._state["newest_iat"] = max(self._state.get("newest_iat") or 0, claims["iat"])
            self._state.pop("refusal", None)
            self._state.pop("refused_at", None)
            self._save()
        return Verdict.of(claims, False)

    def _offline_verdict(self) -> Verdict:
        """The verdict from the stored lease while the server cannot be reached, or answers
        that the vendor's account is suspended."""
        if self._state.get("refusal"):
            # The server's last answer was a refusal: it stands until the server says otherwise.
            return Verdict(False, self._state["refusal"])
        # The server's last answer was a suspension of the vendor's account: what ends the
        # app's license is that, not the server being out of reach.
        suspended = bool(self._state.get("suspended_at"))
        lease = self._state.get("lease")
        if not lease:
            return Verdict(False, "tenant_suspended" if suspended else "unreachable")
        try:
            return Verdict.of(self._check_lease(lease), True)
        except LeaseError as e:
            if e.code == "expired" and e.claims and e.claims.get("floating"):
                # A floating seat lives only while leased: the server let it go when this
                # lease ran out, and says seat_lapsed once it is reached again.
                v = Verdict(False, "seat_lapsed")
                self._report_lapse(lease, v)
                return v
            if e.code == "expired" and suspended:
                return Verdict(False, "tenant_suspended")
            return Verdict(False, e.code)

    def _report_lapse(self, lease: Optional[str], v: Verdict) -> None:
        """Calls on_lapsed once per lapse: the lapse of one lease is reported by the first
        check that finds it, offline or from the server, and not by the checks after it."""
        with self._lock:
            if lease and self._lapse_reported == lease:
                return
            self._lapse_reported = lease
        if self.on_lapsed:
            self.on_lapsed(v)

    def start_heartbeat(self) -> None:
        """Keeps a floating seat leased in a daemon thread: renews at each lease's
        renew_after until close(), reporting a lapsed seat through on_lapsed."""
        def beat() -> None:
            while not self._stop.is_set():
                v = self.check()
                if v.licensed and v.renew_after is not None and self._now() >= v.renew_after:
                    # check() renews a lease past its renew_after in the background, one
                    # renewal at a time: the lease it brings sets the next wait.
                    self.wait_renewal()
                    v = self.check()
                wait = max(v.renew_after - self._now(), 1.0) if v.licensed and v.renew_after else MIN_FAILING_INTERVAL_SECONDS
                self._heartbeat_wait(wait)
        self._heartbeat = threading.Thread(target=beat, daemon=True)
        self._heartbeat.start()

    def close(self) -> None:
        """Stops the heartbeat and, for a floating seat, releases it at once."""
        self._stop.set()
        self.wait_renewal()
        lease, token = self._state.get("lease"), self._state.get("token")
        if not lease or not token:
            return
        if _lease_floats(lease):
            self.deactivate()
