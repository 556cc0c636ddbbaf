// verify.js: node verify.js lease-keys.json lease.jwt   (Node's built-in crypto only)
const crypto = require('crypto');
const fs = require('fs');
const jwks = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
const [h, p, s] = fs.readFileSync(process.argv[3], 'utf8').trim().split('.');
const header = JSON.parse(Buffer.from(h, 'base64url'));
if (header.alg !== 'EdDSA' || header.typ !== 'keyhouse-lease+jwt') { console.log('INVALID header'); process.exit(2); }
// The key named by kid; a key missing from the set (retired, or never ours) fails.
const jwk = jwks.keys.find((k) => k.kid === header.kid);
const key = jwk && crypto.createPublicKey({ key: { kty: 'OKP', crv: 'Ed25519', x: jwk.x }, format: 'jwk' });
if (!key || !crypto.verify(null, Buffer.from(`${h}.${p}`), key, Buffer.from(s, 'base64url'))) {
  console.log('INVALID signature'); process.exit(1);
}
const claims = JSON.parse(Buffer.from(p, 'base64url'));
if (Date.now() / 1000 >= claims.exp) { console.log('signature OK, but the lease EXPIRED'); process.exit(1); }
console.log(`valid: ${claims.sub} on ${claims.instance_id} until ${new Date(claims.exp * 1000).toISOString().replace('.000Z', 'Z')}, entitlements [${claims.entitlements.join(' ')}]`);
