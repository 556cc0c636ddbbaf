// The live scenario list, run against the real stack by stack/e2e (TestSDKScenarios),
// which sets KEYHOUSE_E2E; skipped without it.
'use strict';
const test = require('node:test');
const assert = require('node:assert');
const fs = require('fs');
const os = require('os');
const path = require('path');
const { Client, KeyhouseError, MAX_BACKOFF_MS } = require('../dist/index.js');

const raw = process.env.KEYHOUSE_E2E;
const f = raw ? JSON.parse(raw) : null;
const skip = f ? false : 'KEYHOUSE_E2E not set: stack/e2e TestSDKScenarios runs this suite against the stack';

async function control(what) {
  const resp = await fetch(`${f.control}/${what}`, { method: 'POST' });
  assert.strictEqual(resp.status, 200, `control ${what}`);
  return (await resp.json()).count;
}

const hasCode = (code) => (err) => err instanceof KeyhouseError && err.code === code;

test('live scenarios', { skip }, async (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'keyhouse-js-'));
  const logs = [];
  let now = Date.now();
  const client = (key, store) => new Client({
    url: f.url, productId: f.product_id, key, publicKeyPem: f.public_key_pem,
    storePath: path.join(dir, store), logger: (line) => logs.push(line), now: () => now,
  });
  const c = client(f.keys.main, 'main.json');

  await t.test('scenario: activate', async () => {
    assert.deepStrictEqual(await c.activate('laptop-1'), { alreadyActivated: false, instanceId: 'laptop-1' });
    assert.strictEqual((await client(f.keys.main, 'main.json').activate('laptop-1')).alreadyActivated, true);
    await client(f.keys.capped, 'capped-1.json').activate('one');
    await assert.rejects(client(f.keys.capped, 'capped-2.json').activate('two'), (err) =>
      err.code === 'activation_limit_exceeded' && err.status === 403 && err.message === 'Activation limit exceeded for this license key');
  });

  await t.test('scenario: verify and validate online', async () => {
    const lic = await c.verify();
    assert.strictEqual(lic.valid, true);
    assert.strictEqual(lic.tier, 'pro');
    assert.strictEqual(lic.product_id, f.product_id);
    assert.strictEqual(await c.validate(), true);
    await assert.rejects(client('KH-NO-SUCH-KEY', 'none.json').verify(), hasCode('license_not_found'));
  });

  await t.test('scenario: usage', async () => {
    assert.strictEqual(await c.trackUsage('users', 3), 3);
    await assert.rejects(c.trackUsage('users', 8), hasCode('usage_limit_exceeded'));
    await assert.rejects(c.trackUsage('seats', 1), hasCode('metric_not_allowed'));
    const r = await c.usageReport();
    assert.deepStrictEqual(r.metrics, [{ metric: 'users', used: 3, limit: 10, remaining: 7, exceeded: false }]);
  });

  await t.test('scenario: signed update check', async () => {
    const rel = await c.checkUpdate('1.0.0', f.release.channel, f.release.platform);
    assert.strictEqual(rel.version, f.release.version);
    assert.strictEqual(await c.checkUpdate(f.release.version, f.release.channel, f.release.platform), null);
  });

  await t.test('scenario: offline export', () => {
    assert.strictEqual(c.verifyOfflineExport(f.export_json).key, f.keys.main);
    const tampered = f.export_json.replace('"tier":"pro"', '"tier":"enterprise"');
    assert.throws(() => c.verifyOfflineExport(tampered), hasCode('invalid_signature'));
  });

  await t.test('scenario: gateway out of reach', async () => {
    await control('mode?m=down');
    try {
      const before = await control('count');
      await assert.rejects(c.verify(), hasCode('unreachable'));
      await assert.rejects(c.verify(), hasCode('backing_off'));
      assert.strictEqual((await control('count')) - before, 1);
    } finally {
      await control('mode?m=pass');
    }
    now += MAX_BACKOFF_MS;
    assert.strictEqual((await c.verify()).valid, true);
  });

  await t.test('scenario: retry storm', async () => {
    const storm = client(f.keys.storm, 'storm.json');
    await control('mode?m=503');
    try {
      await control('reset');
      await assert.rejects(storm.verify(), hasCode('unavailable'));
      const minutes = 10;
      for (let i = 0; i < minutes * 60; i++) {
        now += 1000;
        await storm.verify().catch(() => {});
      }
      const n = await control('count');
      assert.ok(n >= 2 && n <= 1 + minutes, `${n} requests in ${minutes} minutes after the first failure`);
      // Retry-After longer than the backoff is honoured.
      now += MAX_BACKOFF_MS;
      await control('mode?m=503&retry_after=300');
      await control('reset');
      await storm.verify().catch(() => {});
      for (let i = 0; i < 299; i++) {
        now += 1000;
        await storm.verify().catch(() => {});
      }
      assert.strictEqual(await control('count'), 1);
    } finally {
      await control('mode?m=pass');
    }
  });

  const token = JSON.parse(fs.readFileSync(path.join(dir, 'main.json'), 'utf8')).token;
  await t.test('scenario: deactivate', async () => {
    now += MAX_BACKOFF_MS;
    assert.strictEqual(await c.deactivate(), true);
    await assert.rejects(c.validate(), hasCode('not_activated'));
  });

  await t.test('scenario: no secret in a log line', () => {
    const text = logs.join('\n');
    assert.ok(text.includes('keyhouse:'), 'nothing was logged; the check would be vacuous');
    assert.ok(token && !text.includes(token), 'the activation token is in the logs (or was never stored)');
    for (const key of Object.values(f.keys)) assert.ok(!text.includes(key), 'a license key is in the logs');
  });
});
