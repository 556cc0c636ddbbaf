// verify.js: node verify.js public-key.pem license.json
const crypto = require('crypto');
const fs = require('fs');
const pem = fs.readFileSync(process.argv[2], 'utf8');
const { license, signature } = JSON.parse(fs.readFileSync(process.argv[3], 'utf8'));
// JSON.stringify of the parsed object rebuilds the signed bytes: fields in the server's
// order, compact, limits' keys already sorted.
const ok = crypto.verify('sha256', Buffer.from(JSON.stringify(license)), pem, Buffer.from(signature, 'base64'));
if (!ok) { console.log('INVALID signature'); process.exit(1); }
if (license.expires_at && new Date(license.expires_at) < new Date()) { console.log('signature OK, but the license EXPIRED'); process.exit(1); }
console.log(`valid: ${license.key} tier ${license.tier} for ${license.product_id}, limits ${JSON.stringify(license.limits)}`);
