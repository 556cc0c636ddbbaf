# verify.py: python3 verify.py public-key.pem license.json   (pip install cryptography)
import base64, json, sys
from datetime import datetime, timezone
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding
from cryptography.exceptions import InvalidSignature

public_key = serialization.load_pem_public_key(open(sys.argv[1], "rb").read())
doc = json.load(open(sys.argv[2], encoding="utf-8"))
lic = doc["license"]
# Compact, in the server's field order (dicts keep it), UTF-8 as is: the signed bytes.
signed = json.dumps(lic, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
try:
    public_key.verify(base64.b64decode(doc["signature"]), signed, padding.PKCS1v15(), hashes.SHA256())
except InvalidSignature:
    sys.exit("INVALID signature")
if lic["expires_at"] and datetime.fromisoformat(lic["expires_at"].replace("Z", "+00:00")) < datetime.now(timezone.utc):
    sys.exit("signature OK, but the license EXPIRED")
print(f"valid: {lic['key']} tier {lic['tier']} for {lic['product_id']}, limits {lic['limits']}")
