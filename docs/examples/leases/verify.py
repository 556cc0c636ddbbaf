# verify.py: python3 verify.py lease-keys.json lease.jwt   (the `cryptography` package)
import base64, json, sys, time
from datetime import datetime, timezone
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from cryptography.exceptions import InvalidSignature

def b64url(s):
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))

jwks = json.load(open(sys.argv[1], encoding="utf-8"))
h, p, s = open(sys.argv[2], encoding="ascii").read().strip().split(".")
header = json.loads(b64url(h))
if header.get("alg") != "EdDSA" or header.get("typ") != "keyhouse-lease+jwt":
    print("INVALID header"); sys.exit(2)
# The key named by kid; a key missing from the set (retired, or never ours) fails.
jwk = next((k for k in jwks["keys"] if k["kid"] == header["kid"]), None)
try:
    if jwk is None:
        raise InvalidSignature()
    Ed25519PublicKey.from_public_bytes(b64url(jwk["x"])).verify(b64url(s), f"{h}.{p}".encode("ascii"))
except InvalidSignature:
    print("INVALID signature"); sys.exit(1)
claims = json.loads(b64url(p))
if time.time() >= claims["exp"]:
    print("signature OK, but the lease EXPIRED"); sys.exit(1)
until = datetime.fromtimestamp(claims["exp"], timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
print(f"valid: {claims['sub']} on {claims['instance_id']} until {until}, entitlements [{' '.join(claims['entitlements'])}]")
