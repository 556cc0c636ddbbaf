// The shared vectors (clients/testdata/vectors.json): the suite every SDK passes.
'use strict';
const test = require('node:test');
const assert = require('node:assert');
const fs = require('fs');
const path = require('path');
const kh = require('../dist/index.js');

const v = JSON.parse(fs.readFileSync(path.join(__dirname, '..', '..', 'testdata', 'vectors.json'), 'utf8'));
const nowMs = v.now * 1000;

test('instance ids derive from the most stable component', () => {
  assert.ok(v.components.instance_ids.length > 0);
  for (const c of v.components.instance_ids) assert.strictEqual(kh.instanceId(c.components), c.instance_id, JSON.stringify(c.components));
});

test('components hash with the product id', () => {
  for (const [name, raw] of Object.entries(v.components.raw)) {
    assert.strictEqual(kh.hashComponent(v.components.product_id, raw), v.components.hashed[name], name);
  }
});

for (const e of v.exports) {
  test(`offline export: ${e.name}`, () => {
    if (e.ok) {
      const lic = kh.verifyOfflineExport(e.json, v.rsa_public_key_pem, nowMs);
      assert.strictEqual(lic.key, e.key);
      assert.strictEqual(lic.tier, e.tier);
    } else {
      assert.throws(() => kh.verifyOfflineExport(e.json, v.rsa_public_key_pem, nowMs), (err) => err.code === e.error);
    }
  });
}

for (const m of v.manifests) {
  test(`manifest: ${m.name}`, () => {
    const run = () => kh.verifyManifest(m.release, m.request, v.rsa_public_key_pem, nowMs, m.max_age);
    if (m.ok) run();
    else assert.throws(run, (err) => err.code === m.error);
  });
}

for (const l of v.leases) {
  test(`lease: ${l.name}`, () => {
    let got = 'licensed';
    try {
      kh.verifyLease(l.lease, v.lease_keys[l.keys], {
        productId: v.product_id, licenseKey: v.license_key, nowSeconds: v.now,
        newestIatSeen: l.newest_iat_seen || 0, components: l.components,
      });
    } catch (err) {
      got = err.code;
    }
    assert.strictEqual(got, l.verdict);
  });
}

test('error codes', () => {
  for (const e of v.errors) assert.strictEqual(kh.errorCode(e.status, e.error), e.code, e.error);
});
