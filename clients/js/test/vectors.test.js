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

// The numbers a signed license may hold, as JSON.stringify writes them: what the server
// signs (pkg/signing) and what the other SDKs write back must be these bytes.
test('numbers vectors are JSON.stringify of the number read', () => {
  assert.ok(v.numbers.length > 0);
  for (const n of v.numbers) assert.strictEqual(JSON.stringify(JSON.parse(n.in)), n.json, n.name);
});

for (const m of v.manifests) {
  test(`manifest: ${m.name}`, () => {
    const run = () => kh.verifyManifest(m.release, m.request, v.rsa_public_key_pem, nowMs, m.max_age);
    if (m.ok) run();
    else assert.throws(run, (err) => err.code === m.error);
  });
}

// A planned key rotation: an app that ships the current and the next key verifies what
// either signed, the same as with one key; with the current key alone, what the next key
// signed is invalid_signature.
const bothKeys = [v.rsa_public_key_pem, v.rotation.rsa_next_public_key_pem];
const expectExport = (e, keys, ok, error) => {
  if (ok) {
    const lic = kh.verifyOfflineExport(e.json, keys, nowMs);
    assert.strictEqual(lic.key, e.key);
    assert.strictEqual(lic.tier, e.tier);
  } else {
    assert.throws(() => kh.verifyOfflineExport(e.json, keys, nowMs), (err) => err.code === error);
  }
};
const expectManifest = (m, keys, ok, error) => {
  const run = () => kh.verifyManifest(m.release, m.request, keys, nowMs, m.max_age);
  if (ok) run();
  else assert.throws(run, (err) => err.code === error);
};
for (const e of v.exports) test(`offline export with both keys: ${e.name}`, () => expectExport(e, bothKeys, e.ok, e.error));
for (const m of v.manifests) test(`manifest with both keys: ${m.name}`, () => expectManifest(m, bothKeys, m.ok, m.error));
test('rotation vectors are present', () => assert.ok(v.rotation.exports.length > 0 && v.rotation.manifests.length > 0));
for (const e of v.rotation.exports) {
  test(`rotation: offline export ${e.name}`, () => {
    expectExport(e, bothKeys, e.ok, e.error);
    expectExport(e, [...bothKeys].reverse(), e.ok, e.error);
    expectExport(e, v.rsa_public_key_pem, false, 'invalid_signature');
  });
}
for (const m of v.rotation.manifests) {
  test(`rotation: manifest ${m.name}`, () => {
    expectManifest(m, bothKeys, m.ok, m.error);
    expectManifest(m, [...bothKeys].reverse(), m.ok, m.error);
    expectManifest(m, v.rsa_public_key_pem, false, 'invalid_signature');
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
