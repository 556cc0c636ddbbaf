// A hosted server whose operator suspended the vendor's account answers 403 Tenant is
// suspended. That is the vendor's matter, not the customer's license: the stored lease and
// token are kept, the lease answers licensed until its exp and tenant_suspended after it,
// the server is asked at most once a minute, and one answer after the suspension is lifted
// licenses the app again. A fake server on a real socket, signing real leases.
'use strict';
const test = require('node:test');
const assert = require('node:assert');
const crypto = require('crypto');
const fs = require('fs');
const http = require('http');
const os = require('os');
const path = require('path');
const { Client, KeyhouseError } = require('../dist/index.js');

const b64 = (x) => Buffer.from(typeof x === 'string' ? x : JSON.stringify(x)).toString('base64url');

/** A hosted server of one tenant: leases of an hour (renewed after half an hour) on the real
 * clock, the client's nonce signed into them; every request answered 403 Tenant is
 * suspended while `suspended`. */
async function fakeServer({ floating = false } = {}) {
  const { publicKey, privateKey } = crypto.generateKeyPairSync('ed25519');
  const kid = 'kid-t_vendor';
  const s = { suspended: false, requests: {} };
  const lease = (key, nonce) => {
    const now = Math.floor(Date.now() / 1000);
    const claims = {
      iss: 'https://licenses.example.com', sub: key, aud: 'app', jti: 'j', iat: now, exp: now + 3600, renew_after: now + 1800,
      tier: 'pro', status: 'active', license_expires_at: null, limits: {}, entitlements: [], instance_id: 'm', floating,
      components: null, tenant_id: 't_vendor', ...(nonce ? { nonce } : {}),
    };
    const input = `${b64({ alg: 'EdDSA', kid, typ: 'keyhouse-lease+jwt' })}.${b64(claims)}`;
    return `${input}.${crypto.sign(null, Buffer.from(input), privateKey).toString('base64url')}`;
  };
  const srv = http.createServer((req, res) => {
    let raw = '';
    req.on('data', (d) => (raw += d));
    req.on('end', () => {
      const url = new URL(req.url, 'http://x');
      s.requests[url.pathname] = (s.requests[url.pathname] || 0) + 1;
      const body = raw ? JSON.parse(raw) : {};
      const answer = (status, obj) => {
        res.writeHead(status, { 'Content-Type': 'application/json' });
        res.end(JSON.stringify(obj));
      };
      if (s.suspended) return answer(403, { error: 'Tenant is suspended' });
      switch (url.pathname) {
        case '/v1/verify-license':
          return answer(200, { valid: true, tier: 'pro', product_id: 'app', status: 'active' });
        case '/v1/activate-license':
          return answer(200, { activated: true, token: 'act_1' });
        case '/v1/leases':
          return answer(200, { lease: lease(body.key, body.nonce) });
        case '/v1/lease-keys':
          return answer(200, { keys: url.searchParams.get('tenant_id') === 't_vendor' ? [{ ...publicKey.export({ format: 'jwk' }), kid }] : [] });
        default:
          return answer(404, { error: 'Not found' });
      }
    });
  });
  await new Promise((resolve) => srv.listen(0, '127.0.0.1', resolve));
  s.url = `http://127.0.0.1:${srv.address().port}`;
  s.close = () => new Promise((resolve) => srv.close(resolve));
  s.count = (route) => s.requests[route] || 0;
  return s;
}

async function activated(s, extra = {}) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'keyhouse-js-suspended-'));
  const clock = { now: Date.now() };
  const storePath = path.join(dir, 'store.json');
  const make = () => new Client({ url: s.url, productId: 'app', key: 'KEY-1', storePath, components: {}, now: () => clock.now, ...extra });
  const c = make();
  await c.activate('m');
  return { c, clock, storePath, make, stored: () => JSON.parse(fs.readFileSync(storePath, 'utf8')) };
}

const hasCode = (code) => (err) => err instanceof KeyhouseError && err.code === code;

test('tenant suspended: the lease is kept, licensed until exp, paced, licensed again once lifted', async (t) => {
  const s = await fakeServer();
  t.after(s.close);
  const { c, clock, make, stored } = await activated(s);
  let v = await c.check();
  assert.deepStrictEqual([v.licensed, v.offline], [true, false], 'online');
  s.suspended = true;
  let asked = s.count('/v1/leases');
  // Past renew_after, for ten minutes a check every second: each starts a renewal the
  // server refuses, and each is licensed from the lease.
  clock.now += 1801_000;
  for (let i = 0; i < 600; i++) {
    v = await c.check();
    assert.deepStrictEqual([v.licensed, v.offline], [true, true], `check ${i}, suspended: ${JSON.stringify(v)}`);
    await c.pendingRenewal;
    clock.now += 1000;
  }
  const n = s.count('/v1/leases') - asked;
  assert.ok(n >= 2 && n <= 10, `${n} lease requests in 600 checks over ten minutes, want one a minute (2 to 10)`);
  let st = stored();
  assert.ok(st.lease && st.token && st.suspended_at, 'the store keeps the lease and the token, and the suspension');

  // Other calls fail with tenant_suspended, at the same pace, and drop nothing.
  clock.now += 60_000;
  await assert.rejects(c.verify(), hasCode('tenant_suspended'));
  await assert.rejects(c.trackUsage('users', 1), hasCode('backing_off'));
  clock.now += 60_000;
  await assert.rejects(c.trackUsage('users', 1), hasCode('tenant_suspended'));
  // A restarted app keeps the pace: no request within the minute, licensed from the lease.
  asked = s.count('/v1/leases');
  const restarted = make();
  v = await restarted.check();
  assert.deepStrictEqual([v.licensed, v.offline], [true, true], `restarted: ${JSON.stringify(v)}`);
  await restarted.pendingRenewal;
  assert.strictEqual(s.count('/v1/leases') - asked, 0, 'a restarted app asked within the minute');

  // Past the lease's exp: tenant_suspended, not expired; still one request a minute.
  clock.now += 3600_000;
  asked = s.count('/v1/leases');
  for (let i = 0; i < 120; i++) {
    v = await c.check();
    assert.deepStrictEqual([v.licensed, v.reason], [false, 'tenant_suspended'], `check ${i} past exp`);
    clock.now += 1000;
  }
  const m = s.count('/v1/leases') - asked;
  assert.ok(m >= 1 && m <= 2, `${m} lease requests in two minutes past exp, want one a minute`);
  st = stored();
  assert.ok(st.lease && st.token, 'the lease or the token was dropped');

  // The suspension is lifted: the first renewal a minute after the last ask is licensed.
  s.suspended = false;
  clock.now += 60_000;
  v = await c.check();
  assert.deepStrictEqual([v.licensed, v.offline], [true, false], `after the suspension was lifted: ${JSON.stringify(v)}`);
  assert.strictEqual(stored().suspended_at, undefined, 'the suspension is still stored after a lease');
});

test('tenant suspended with no lease: tenant_suspended, one request a minute', async (t) => {
  const s = await fakeServer();
  t.after(s.close);
  const { c, clock } = await activated(s);
  s.suspended = true;
  for (let i = 0; i < 30; i++) {
    const v = await c.check();
    assert.deepStrictEqual([v.licensed, v.reason], [false, 'tenant_suspended'], `check ${i}`);
    clock.now += 1000;
  }
  assert.strictEqual(s.count('/v1/leases'), 1, 'lease requests in 30 checks');
  s.suspended = false;
  clock.now += 60_000;
  assert.strictEqual((await c.renew()).licensed, true, 'lifted');
});

test('tenant suspended: a floating lease past its exp is seat_lapsed, reported once, the token kept', async (t) => {
  const s = await fakeServer({ floating: true });
  t.after(s.close);
  const lapsed = [];
  const { c, clock, stored } = await activated(s, { onLapsed: (v) => lapsed.push(v) });
  const first = await c.check();
  assert.ok(first.licensed && first.floating, JSON.stringify(first));
  s.suspended = true;
  clock.now += 3601_000;
  for (let i = 0; i < 3; i++) {
    const v = await c.check();
    assert.deepStrictEqual([v.licensed, v.reason], [false, 'seat_lapsed'], `check ${i}`);
    clock.now += 60_000;
  }
  assert.strictEqual(lapsed.length, 1, 'onLapsed calls');
  assert.ok(stored().token, 'the token was dropped');
});
