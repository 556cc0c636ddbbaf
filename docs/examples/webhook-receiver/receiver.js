// receiver.js: a Keyhouse webhook receiver (Node, no dependencies) that verifies
// Keyhouse-Signature and skips events it has already handled.
//
//   WEBHOOK_SECRET=whsec_… node receiver.js [port, default any free one]
'use strict';
const crypto = require('node:crypto');
const http = require('node:http');

const secret = process.env.WEBHOOK_SECRET;
const toleranceSeconds = 300; // refuse replays of old deliveries

// header: t=<unix>,v1=<hex>[,v1=<hex>…]; one v1 must be HMAC-SHA256(secret, "<t>.<body>")
// over the exact bytes received (one v1 per live secret during secret rolls).
function verify(header, body) {
  let ts = null;
  const sigs = [];
  for (const part of (header || '').split(',')) {
    const i = part.indexOf('=');
    const k = part.slice(0, i), v = part.slice(i + 1);
    if (k === 't') ts = v;
    if (k === 'v1') sigs.push(v);
  }
  if (!/^\d+$/.test(ts || '') || Math.abs(Date.now() / 1000 - Number(ts)) > toleranceSeconds) return false;
  const want = crypto.createHmac('sha256', secret).update(ts + '.').update(body).digest();
  return sigs.some((s) => {
    const got = Buffer.from(s, 'hex');
    return got.length === want.length && crypto.timingSafeEqual(got, want);
  });
}

const seen = new Set(); // use your database in production: deliveries are at least once

const server = http.createServer((req, res) => {
  const chunks = [];
  req.on('data', (c) => chunks.push(c));
  req.on('end', () => {
    const body = Buffer.concat(chunks);
    if (!verify(req.headers['keyhouse-signature'], body)) {
      console.log('rejected');
      res.writeHead(400).end('invalid signature');
      return;
    }
    const event = JSON.parse(body.toString('utf8'));
    if (seen.has(event.id)) {
      console.log('duplicate', event.id);
    } else {
      seen.add(event.id);
      console.log('verified', event.id, event.type); // handle the event here
    }
    res.writeHead(204).end(); // answer 2xx fast; do slow work afterwards
  });
});

server.listen(Number(process.argv[2] || 0), '127.0.0.1', () => {
  console.log('listening on', server.address().port);
});
