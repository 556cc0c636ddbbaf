// check-update.js: the update check of an app, in Node 18+ with no dependencies.
//
//   node check-update.js --url https://licenses.example.com --key XXXX-... --product my-app \
//     --current 1.4.2 [--channel stable] [--platform linux-x64] --public-key keyhouse.pem \
//     [--cache update-cache.json] [--max-age 86400]
//
// keyhouse.pem holds every public key GET /v1/public-keys lists when the app is built
// (PEM blocks one after the other: the current key and, during a planned rotation, the
// next), so that the app keeps verifying after the server promotes the next key.
//
// Every manifest, fetched or cached, is checked before it is believed: its RSA signature
// against one of the public keys shipped with the app, that it answers this app's product,
// channel and platform, and its age (issued_at). A signed manifest stays valid forever,
// also after the release was unpublished, so the age check is what stops an old answer
// from being replayed: a fresh answer must be fresh, a cached one younger than --max-age.
'use strict';
const crypto = require('crypto');
const fs = require('fs');

// The signed fields, in the order the server signs them (api.md, check-update rule 6).
const SIGNED = ['product_id', 'version', 'channel', 'platform', 'artifact_url', 'checksum', 'release_notes', 'issued_at'];
// How far a just-fetched manifest's issued_at may be from this machine's clock.
const CLOCK_SKEW_SECONDS = 300;

// publicKeys splits a PEM file into its public keys.
function publicKeys(pemText) {
  const keys = pemText.match(/-----BEGIN PUBLIC KEY-----[\s\S]*?-----END PUBLIC KEY-----/g) || [];
  if (keys.length === 0) throw new Error('--public-key holds no PEM public key');
  return keys;
}

// checkManifest throws unless release is signed by one of the keys (a PEM string or a
// list of them), answers the request, and was issued at most maxAgeSeconds ago.
function checkManifest(release, publicKeyPems, request, maxAgeSeconds) {
  const signed = {};
  for (const f of SIGNED) {
    if (typeof release[f] !== 'string') throw new Error(`INVALID signature: manifest has no ${f}`);
    signed[f] = release[f];
  }
  // JSON.stringify of an object built in the signed order reproduces the signed bytes.
  const bytes = Buffer.from(JSON.stringify(signed));
  const ok = typeof release.signature === 'string' && [].concat(publicKeyPems).some((pem) =>
    crypto.verify('sha256', bytes, pem, Buffer.from(release.signature, 'base64')));
  if (!ok) throw new Error('INVALID signature');
  if (release.product_id.trim().toLowerCase() !== request.product_id.trim().toLowerCase() ||
      release.channel !== request.channel || release.platform !== request.platform) {
    throw new Error('manifest answers another product, channel or platform');
  }
  const age = (Date.now() - Date.parse(release.issued_at)) / 1000;
  if (!(age <= maxAgeSeconds && age >= -CLOCK_SKEW_SECONDS)) throw new Error(`manifest too old (${Math.round(age)} s)`);
}

function readCache(path, request) {
  try {
    const cached = JSON.parse(fs.readFileSync(path, 'utf8'));
    return JSON.stringify(cached.request) === JSON.stringify(request) ? cached.release : null;
  } catch {
    return null; // no cache yet, or unreadable: ask the server
  }
}

async function fetchManifest(url, key, request) {
  const resp = await fetch(url.replace(/\/$/, '') + '/v1/check-update', {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ key, ...request }),
  });
  const body = await resp.json();
  if (resp.status !== 200) throw new Error(`check-update: ${resp.status} ${body.error}`);
  return body.release; // null: no newer release
}

async function main(argv) {
  const opt = { channel: 'stable', platform: '', 'max-age': '86400' };
  for (let i = 0; i + 1 < argv.length; i += 2) opt[argv[i].replace(/^--/, '')] = argv[i + 1];
  for (const name of ['url', 'key', 'product', 'current', 'public-key']) {
    if (!opt[name]) throw new Error(`--${name} is required`);
  }
  const publicKeyPems = publicKeys(fs.readFileSync(opt['public-key'], 'utf8'));
  const request = { product_id: opt.product, channel: opt.channel, platform: opt.platform, current_version: opt.current };
  const maxAge = Number(opt['max-age']);

  let release = null;
  let source = 'fetched';
  if (opt.cache) {
    const cached = readCache(opt.cache, request);
    if (cached) {
      try {
        checkManifest(cached, publicKeyPems, request, maxAge);
        release = cached;
        source = 'cached';
      } catch (err) {
        console.log(`cached manifest discarded: ${err.message}`);
      }
    }
  }
  if (!release) {
    release = await fetchManifest(opt.url, opt.key, request);
    if (!release) {
      if (opt.cache) fs.rmSync(opt.cache, { force: true });
      console.log(`up to date: ${opt.current}`);
      return;
    }
    checkManifest(release, publicKeyPems, request, CLOCK_SKEW_SECONDS);
    if (opt.cache) fs.writeFileSync(opt.cache, JSON.stringify({ request, release }));
  }
  // Download artifact_url and compare it with checksum before installing it.
  console.log(`update available: ${release.version} ${release.artifact_url} (${source})`);
}

if (require.main === module) {
  main(process.argv.slice(2)).catch((err) => {
    console.log(err.message);
    process.exit(1);
  });
}

module.exports = { checkManifest, publicKeys };
