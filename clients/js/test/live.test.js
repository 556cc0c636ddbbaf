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

async function control(what, base = f.control) {
  const resp = await fetch(`${base}/${what}`, { method: 'POST' });
  assert.strictEqual(resp.status, 200, `control ${what}`);
  return (await resp.json()).count;
}

async function idempotencyKeys() {
  const resp = await fetch(`${f.control}/count`, { method: 'POST' });
  return (await resp.json()).idempotency_keys;
}

/** How many POST /v1/leases the proxy saw since its last reset. */
async function leaseRequests(base = f.control) {
  const resp = await fetch(`${base}/count`, { method: 'POST' });
  return (await resp.json()).routes.filter((r) => r === 'POST /v1/leases').length;
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
    // An app configured with another product takes no seat of the license.
    const misconfigured = new Client({ url: f.url, productId: `another-${f.product_id}`, key: f.keys.capped, storePath: path.join(dir, 'wrong.json'), now: () => now });
    await assert.rejects(misconfigured.activate('one'), hasCode('wrong_product'));
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

  await t.test('scenario: an increment whose answer was lost counts once', async () => {
    await control('reset');
    await control('mode?m=lose-answer');
    assert.strictEqual(await c.trackUsage('users', 2), 5);
    // The app's own key: the same increment sent twice counts once. (Keys are per tenant:
    // each suite's product makes it its own.)
    const own = `usage-${f.product_id}`;
    for (let i = 0; i < 2; i++) assert.strictEqual(await c.trackUsage('users', 1, { idempotencyKey: own }), 6);
    const keys = await idempotencyKeys();
    assert.ok(keys.length === 4 && keys[0] && keys[0] === keys[1] && keys[2] === own && keys[3] === keys[2], JSON.stringify(keys));
    assert.strictEqual((await c.usageReport()).metrics[0].used, 6);
  });

  await t.test('scenario: signed update check', async () => {
    const rel = await c.checkUpdate('1.0.0', f.release.channel, f.release.platform);
    assert.strictEqual(rel.version, f.release.version);
    assert.strictEqual(await c.checkUpdate(f.release.version, f.release.channel, f.release.platform), null);
    // '' is the stable channel (the fixture's release is on stable), in every SDK.
    const fromEmpty = await c.checkUpdate('1.0.0', '', f.release.platform);
    assert.strictEqual(fromEmpty.channel, 'stable');
    assert.strictEqual(fromEmpty.version, f.release.version);
  });

  await t.test('scenario: offline export', () => {
    assert.strictEqual(c.verifyOfflineExport(f.export_json).key, f.keys.main);
    const tampered = f.export_json.replace('"tier":"pro"', '"tier":"enterprise"');
    assert.throws(() => c.verifyOfflineExport(tampered), hasCode('invalid_signature'));
    assert.strictEqual(c.verifyOfflineExport(f.export_fractions_json).limits.admins, 1e-7);
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

test('live lease scenarios', { skip }, async (t) => {
  const { hashComponent } = require('../dist/index.js');
  const { spawn } = require('child_process');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'keyhouse-js-lease-'));
  const here = { machine_id: hashComponent(f.product_id, 'sdk-e2e-machine-1') };
  const elsewhere = { machine_id: hashComponent(f.product_id, 'sdk-e2e-machine-2') };
  // Each client has a clock of its own, starting at the real time (the server's).
  const client = (key, store, components, extra = {}) => {
    const clock = { now: Date.now() };
    const c = new Client({ url: f.url, productId: f.product_id, key, leaseKeys: f.lease_keys, storePath: path.join(dir, store), components, now: () => clock.now, ...extra });
    return [c, clock];
  };
  const copyStore = (from, to) => fs.copyFileSync(path.join(dir, from), path.join(dir, to));
  const [c] = client(f.keys.lease, 'lease.json', here);

  await t.test('scenario: activate and check online', async () => {
    await c.activate('desk-1');
    const v = await c.check();
    assert.strictEqual(v.licensed, true);
    assert.strictEqual(v.offline, false);
    assert.strictEqual(v.tier, 'pro');
    assert.deepStrictEqual(v.entitlements, ['sync']);
    const before = await control('count');
    const again = await c.check();
    assert.ok(again.licensed && again.offline, 'a second check answers from the stored lease');
    assert.strictEqual(await control('count'), before);
  });

  await t.test('scenario: two machines, and a reinstall recovers its seat', async () => {
    const { instanceId } = require('../dist/index.js');
    const [a] = client(f.keys.twoseats, 'machine-a.json', here);
    const [b] = client(f.keys.twoseats, 'machine-b.json', elsewhere);
    assert.notStrictEqual(a.instanceId(), b.instanceId());
    assert.strictEqual(a.instanceId(), instanceId(here));
    for (const m of [a, b]) {
      await m.activate(m.instanceId());
      assert.strictEqual((await m.check()).licensed, true, m.instanceId());
    }
    // Machine a reinstalled: its store is gone, the seat bound to it is still there.
    const [again] = client(f.keys.twoseats, 'machine-a-reinstalled.json', here);
    assert.strictEqual((await again.activate(again.instanceId())).alreadyActivated, true);
    const v = await again.check();
    assert.strictEqual(v.licensed, true, v.reason);
    // A seat not bound to a machine cannot be proven by one: a clear refusal.
    const [u] = client(f.keys.unbound, 'unbound.json', here);
    await u.activate(u.instanceId());
    const [lost] = client(f.keys.unbound, 'unbound-reinstalled.json', here);
    await assert.rejects(lost.activate(lost.instanceId()), hasCode('invalid_activation_token'));
  });

  await t.test('scenario: gateway stopped, licensed from the lease', async () => {
    await control('mode?m=down');
    try {
      copyStore('lease.json', 'offline.json');
      const [app, clock] = client(f.keys.lease, 'offline.json', here);
      clock.now += 601_000; // past renew_after: the background renewal fails
      let v = await app.check();
      assert.ok(v.licensed && v.offline, JSON.stringify(v));
      await app.pendingRenewal;
      v = await app.check();
      assert.ok(v.licensed, JSON.stringify(v));
      // scenario: clock past exp, not licensed
      clock.now += 3600_000;
      v = await app.check();
      assert.deepStrictEqual([v.licensed, v.reason], [false, 'expired']);
    } finally {
      await control('mode?m=pass');
    }
  });

  await t.test('scenario: revoked while offline, refused at the first renewal', async () => {
    const [r, clock] = client(f.keys.revoke, 'revoke.json', here);
    await r.activate('desk-2');
    assert.ok((await r.check()).licensed);
    await control('mode?m=down');
    await control(`revoke?key=${f.keys.revoke}`);
    let v = await r.check();
    assert.ok(v.licensed && v.offline, 'offline, before a renewal');
    // The server's caches may answer for up to 1 s after a change (its bound); an app
    // offline for longer than that reconnects.
    await new Promise((r) => setTimeout(r, 1500));
    await control('mode?m=pass');
    clock.now += 601_000;
    v = await r.check();
    assert.ok(v.licensed, 'the check that starts the renewal answers from the lease');
    await r.pendingRenewal;
    const asked = await leaseRequests();
    const refused = async (what, requests) => {
      const v = await r.check();
      assert.deepStrictEqual([v.licensed, v.reason], [false, 'license_not_active'], what);
      assert.strictEqual(await leaseRequests() - asked, requests, `${what}: lease requests since the refusal`);
    };
    await refused('after the renewal reached the server', 0);

    // Refused: the server is asked again at most once a minute.
    await refused('a check right after the refusal', 0);
    clock.now += 59_000;
    await refused('59 s after the refusal', 0);
    clock.now += 1000;
    await refused('a minute after the refusal, asked again', 1);
    await refused('right after that ask', 1);
    clock.now -= 5 * 60_000;
    await refused('the clock moved back below the last ask, asked at once', 2);

    // Reinstated: licensed again at the first check online a minute after the last ask.
    await control('mode?m=down');
    await control(`reinstate?key=${f.keys.revoke}`);
    clock.now += 60_000;
    await refused('offline, asked and the refusal stands', 3);
    // The server's caches may answer for up to 1 s after a change (its bound).
    await new Promise((r) => setTimeout(r, 1500));
    await control('mode?m=pass');
    clock.now += 59_000;
    await refused('online, 59 s after the last ask', 3);
    clock.now += 1000;
    v = await r.check();
    assert.deepStrictEqual([v.licensed, v.offline], [true, false], 'online a minute after the last ask');
    assert.strictEqual(await leaseRequests() - asked, 4);
  });

  await t.test('scenario: lease copied to another machine', async () => {
    copyStore('lease.json', 'copied.json');
    const [other] = client(f.keys.lease, 'copied.json', elsewhere);
    assert.strictEqual((await other.check()).reason, 'machine_mismatch');
    const v = await other.renew();
    assert.deepStrictEqual([v.licensed, v.reason], [false, 'machine_mismatch']);
  });

  await t.test('scenario: floating seat freed by close()', async () => {
    const [a] = client(f.keys.floating, 'float-a.json', {});
    const [b] = client(f.keys.floating, 'float-b.json', {});
    await a.activate('a');
    const v = await a.check();
    assert.ok(v.licensed && v.floating);
    await assert.rejects(b.activate('b'), hasCode('activation_limit_exceeded'));
    await a.close();
    await b.activate('b');
    assert.ok((await b.check()).licensed);
  });

  await t.test('scenario: floating seat freed after a killed process', async () => {
    const script = `
      const { Client } = require(${JSON.stringify(path.join(__dirname, '..', 'dist', 'index.js'))});
      const c = new Client({ url: ${JSON.stringify(f.url)}, productId: ${JSON.stringify(f.product_id)}, key: ${JSON.stringify(f.keys.killed)},
        storePath: ${JSON.stringify(path.join(dir, 'child.json'))}, components: {} });
      (async () => {
        await c.activate('child');
        const v = await c.check();
        if (!v.licensed) throw new Error(v.reason);
        console.log('leased');
        c.startHeartbeat();
        setInterval(() => {}, 1000);
      })();`;
    const child = spawn(process.execPath, ['-e', script], { stdio: ['ignore', 'pipe', 'inherit'] });
    const line = await new Promise((resolve) => child.stdout.once('data', (d) => resolve(String(d))));
    assert.strictEqual(line, 'leased\n');
    const [other] = client(f.keys.killed, 'after-kill.json', {});
    await assert.rejects(other.activate('other'), hasCode('activation_limit_exceeded'));
    const exited = new Promise((resolve) => child.once('exit', resolve));
    child.kill('SIGKILL');
    await exited;
    const killed = Date.now();
    const deadline = killed + (f.floating_ttl + 15) * 1000;
    for (;;) {
      try {
        await other.activate('other');
        t.diagnostic(`seat free ${((Date.now() - killed) / 1000).toFixed(1)}s after the kill`);
        break;
      } catch (err) {
        if (err.code !== 'activation_limit_exceeded' || Date.now() > deadline) throw err;
      }
      await new Promise((r) => setTimeout(r, 1000));
    }
  });

  await t.test('scenario: floating lease ran out offline, reported once as check() says it', async () => {
    const lapsed = [];
    const [s, clock] = client(f.keys.offlapse, 'offlapse.json', {}, { onLapsed: (v) => lapsed.push(v) });
    await s.activate('roamer');
    const v = await s.check();
    assert.ok(v.licensed && v.floating);
    await control('mode?m=down');
    try {
      clock.now += (f.floating_ttl + 1) * 1000;
      for (let i = 0; i < 3; i++) {
        const after = await s.check();
        assert.deepStrictEqual([after.licensed, after.reason], [false, 'seat_lapsed'], `check ${i}`);
      }
    } finally {
      await control('mode?m=pass');
    }
    assert.deepStrictEqual(lapsed.map((x) => x.reason), ['seat_lapsed']);
  });

  await t.test('scenario: lapsed floating seat reported', async () => {
    const lapsed = [];
    const [s, clock] = client(f.keys.lapsed, 'lapsed.json', {}, { onLapsed: (v) => lapsed.push(v) });
    await s.activate('sleeper');
    assert.ok((await s.check()).licensed);
    // The app slept through its lease (no heartbeat): the server has let the seat go.
    await new Promise((r) => setTimeout(r, (f.floating_ttl + 1) * 1000));
    clock.now += (f.floating_ttl + 1) * 1000;
    const v = await s.check();
    assert.deepStrictEqual([v.licensed, v.reason], [false, 'seat_lapsed']);
    assert.deepStrictEqual(lapsed.map((x) => x.reason), ['seat_lapsed']);
  });

  await t.test('scenario: clock 15 minutes ahead, floating: renewals at renew_after, not every tick', async () => {
    const [s, clock] = client(f.keys.skewfloat, 'skewfloat.json', {});
    clock.now += 15 * 60_000;
    await s.activate('skewed');
    await control('reset');
    // The heartbeat's waits pass on the client's clock, not the test's: a fixed number of
    // ticks, whatever they wait, then the lease requests are counted.
    const ticks = 6;
    const start = clock.now;
    let n = 0;
    await new Promise((done) => {
      s.heartbeatAfter = (beat, waitMs) => {
        clock.now += waitMs;
        if (++n < ticks) setImmediate(beat);
        else done();
        return null;
      };
      s.startHeartbeat();
    });
    if (s.pendingRenewal) await s.pendingRenewal;
    // The manners: a renewal at each lease's renew_after, so over the ticks' time the first
    // lease, one renewal per renew_after elapsed, and one due as the window ends.
    const elapsed = clock.now - start;
    const limit = 2 + Math.floor(elapsed / (f.floating_hour_renew_after * 1000));
    const got = await leaseRequests();
    assert.ok(got >= 2 && got <= limit, `${got} lease requests in ${ticks} heartbeat ticks (${elapsed} ms on the client's clock), want 2 to ${limit}`);
    const v = await s.check();
    assert.ok(v.licensed && v.offline, JSON.stringify(v));
    await s.close();
  });

  await t.test('scenario: clock 2 hours ahead, licensed online', async () => {
    const [s, clock] = client(f.keys.ahead, 'ahead.json', here);
    clock.now += 2 * 3600_000;
    await s.activate('ahead');
    await control('reset');
    const v = await s.check();
    assert.ok(v.licensed && !v.offline, JSON.stringify(v));
    assert.ok(v.leaseExpiresAt.getTime() - clock.now > 50 * 60_000, `the lease's end on this clock: ${v.leaseExpiresAt.toISOString()}`);
    const again = await s.check();
    assert.ok(again.licensed && again.offline, JSON.stringify(again));
    if (s.pendingRenewal) await s.pendingRenewal;
    assert.strictEqual(await leaseRequests(), 1);
    // Offline, the clock put back to the server's time: the lease's clock moves back with
    // it, so the offset does not lengthen the lease.
    await control('mode?m=down');
    try {
      clock.now -= 2 * 3600_000;
      const back = await s.check();
      assert.deepStrictEqual([back.licensed, back.reason], [false, 'clock_tampered']);
    } finally {
      await control('mode?m=pass');
    }
  });

  await t.test('scenario: clock 10 minutes behind, clock_tampered, asked once', async () => {
    const [s, clock] = client(f.keys.behind, 'behind.json', here);
    clock.now -= 10 * 60_000;
    await s.activate('behind');
    await control('reset');
    for (let i = 0; i < 3; i++) {
      const v = await s.check();
      assert.deepStrictEqual([v.licensed, v.reason], [false, 'clock_tampered'], `check ${i}`);
    }
    assert.strictEqual(await leaseRequests(), 1);
    clock.now += 10 * 60_000;
    assert.ok((await s.check()).licensed, 'the clock set right');
    if (s.pendingRenewal) await s.pendingRenewal;
  });

  await t.test('scenario: two copies share a store and a floating seat; closing one is a lapse for the other', async () => {
    const lapsed = [];
    const [a] = client(f.keys.shared, 'shared.json', {});
    await a.activate('one-machine');
    assert.ok((await a.check()).licensed);
    // The second copy starts once the first has activated: it reads the token from the store.
    const [b] = client(f.keys.shared, 'shared.json', {}, { onLapsed: (v) => lapsed.push(v) });
    assert.strictEqual((await b.activate('one-machine')).alreadyActivated, true);
    assert.ok((await b.check()).licensed);
    // Any renewal check() still in the background ends before the first copy closes:
    // otherwise it, not the renew below, meets the released seat, and the renew finds no
    // seat to ask about.
    if (b.pendingRenewal) await b.pendingRenewal;
    await a.close();
    const v = await b.renew();
    assert.deepStrictEqual([v.licensed, v.reason], [false, 'seat_lapsed']);
    assert.deepStrictEqual(lapsed.map((x) => x.reason), ['seat_lapsed']);
    // As after any lapse, activate takes the seat again.
    await b.activate('one-machine');
    assert.ok((await b.check()).licensed);
    await b.close();
  });
});

// Against a tenant of a hosted stack, behind a proxy whose control also suspends and
// resumes the tenant through the operator API.
test('live hosted scenarios', { skip }, async (t) => {
  const h = f.hosted;
  const hosted = (what) => control(what, h.control);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'keyhouse-js-hosted-'));
  const clock = { now: Date.now() };
  const c = new Client({ url: h.url, productId: h.product_id, key: h.keys.suspended, storePath: path.join(dir, 'suspended.json'), components: {}, now: () => clock.now });
  const renewAfterMs = h.renew_after * 1000;

  await t.test('scenario: hosted, the tenant suspended: licensed from the lease, paced; licensed again once resumed', async () => {
    await c.activate('hosted-desk');
    let v = await c.check();
    assert.deepStrictEqual([v.licensed, v.offline], [true, false], JSON.stringify(v));
    // The operator suspends the tenant (an unpaid bill). This server keeps the apps' public
    // checks working (docs/operations.md, "Suspend"): the renewal past renew_after brings a
    // lease, and the checks after it send nothing.
    await hosted(`suspend?tenant=${h.tenant_id}`);
    try {
      await hosted('reset');
      clock.now += renewAfterMs + 1000;
      for (let i = 0; i < 120; i++) {
        v = await c.check();
        assert.ok(v.licensed, `check ${i}, suspended: ${JSON.stringify(v)}`);
        if (c.pendingRenewal) await c.pendingRenewal;
        clock.now += 1000;
      }
      v = await c.check();
      assert.ok(v.licensed && v.renewAfter.getTime() > clock.now, `the renewal while suspended brought no lease: ${JSON.stringify(v)}`);
      assert.strictEqual(await leaseRequests(h.control), 1, 'lease requests in 120 checks');

      // A server that refuses a suspended vendor's apps answers the renewal 403 Tenant is
      // suspended (the proxy answers so): the lease and token are kept, the app licensed
      // from the lease until its exp, and the server asked at most once a minute.
      await hosted('mode?m=suspended');
      await hosted('reset');
      clock.now += renewAfterMs + 1000;
      const minutes = 10;
      for (let i = 0; i < minutes * 60; i++) {
        v = await c.check();
        assert.deepStrictEqual([v.licensed, v.offline], [true, true], `check ${i}, renewals refused: ${JSON.stringify(v)}`);
        if (c.pendingRenewal) await c.pendingRenewal;
        clock.now += 1000;
      }
      const n = await leaseRequests(h.control);
      assert.ok(n >= 2 && n <= minutes, `${n} lease requests in ${minutes} minutes of checks every second, want one a minute`);
      clock.now += 60_000;
      await assert.rejects(c.verify(), hasCode('tenant_suspended'));
      // Past the lease's exp: tenant_suspended, not expired.
      clock.now += h.lease_ttl * 1000;
      for (let i = 0; i < 3; i++) {
        v = await c.check();
        assert.deepStrictEqual([v.licensed, v.reason], [false, 'tenant_suspended'], `check ${i} past exp`);
      }

      // The operator lifts the suspension: the renewal a minute after the last ask is
      // licensed, with the token kept all along.
      await hosted(`resume?tenant=${h.tenant_id}`);
      await hosted('mode?m=pass');
      clock.now += 60_000;
      v = await c.renew();
      assert.deepStrictEqual([v.licensed, v.offline], [true, false], `resumed: ${JSON.stringify(v)}`);
    } finally {
      await hosted('mode?m=pass');
      await hosted(`resume?tenant=${h.tenant_id}`);
    }
  });
});
