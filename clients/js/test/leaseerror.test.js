// A LeaseError of a lease whose signature verified carries its claims, whose sub is the
// license key: code reads them, but printing the error (console.error, util.inspect,
// JSON.stringify) shows no key.
'use strict';
const test = require('node:test');
const assert = require('node:assert');
const fs = require('fs');
const path = require('path');
const util = require('util');
const kh = require('../dist/index.js');

const v = JSON.parse(fs.readFileSync(path.join(__dirname, '..', '..', 'testdata', 'vectors.json'), 'utf8'));

test('a LeaseError prints without the license key its claims hold', () => {
  const l = v.leases.find((x) => x.verdict === 'expired');
  let err;
  try {
    kh.verifyLease(l.lease, v.lease_keys[l.keys], {
      productId: v.product_id, licenseKey: v.license_key, nowSeconds: v.now,
      newestIatSeen: l.newest_iat_seen || 0, components: l.components,
    });
  } catch (e) {
    err = e;
  }
  assert.ok(err instanceof kh.LeaseError, String(err));
  assert.strictEqual(err.code, 'expired');
  assert.strictEqual(err.claims.sub, v.license_key); // readable by code
  for (const shown of [util.inspect(err), util.inspect(err, { depth: Infinity }), util.format('%s %j', err, err), JSON.stringify(err), String(err)]) {
    assert.ok(!shown.includes(v.license_key), `the key is in ${shown}`);
  }
  assert.ok(util.inspect(err).includes("code: 'expired'"), util.inspect(err));
});
