// Browser scenarios for stack/e2e/console_test.go: Debian's chromium driven by
// playwright-core. Usage: node console.mjs <scenario> <config.json>. The config carries
// the base URL, credentials and a client IP (sent as X-Forwarded-For, so each scenario has
// its own rate-limit budget). A scenario prints one JSON line with what the Go test checks
// next, and exits non-zero with a message when something a person would see is wrong.
import { chromium } from 'playwright-core';
import { readFileSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';

const [scenario, configPath] = process.argv.slice(2);
const cfg = JSON.parse(readFileSync(configPath, 'utf8'));
const base = cfg.base;

function check(cond, msg) {
  if (!cond) throw new Error(msg);
}

async function shot(page, name) {
  if (!cfg.screenshots) return;
  mkdirSync(cfg.screenshots, { recursive: true });
  await page.screenshot({ path: join(cfg.screenshots, `console-${name}.png`), fullPage: true });
}

async function text(page, selector) {
  return (await page.locator(selector).first().innerText()).trim();
}

// signInWithKey uses the keyboard only: the key field has focus on load, Enter submits.
async function signInWithKey(page, key) {
  await page.goto(base + '/console/');
  check(page.url().endsWith('/console/login'), `/console/ without a session should go to the sign-in page, got ${page.url()}`);
  // The key field has focus as soon as the page is there (autofocus).
  await page.waitForFunction(() => document.activeElement && document.activeElement.id === 'api_key');
  await page.keyboard.type(key);
  await page.keyboard.press('Enter');
  await page.waitForURL(base + '/console/');
  check((await text(page, 'h1')) === 'Overview', 'signed in: the overview shows');
}

async function signInWithPassword(page, email, password) {
  await page.goto(base + '/console/login?mode=password');
  await page.getByLabel('Email').fill(email);
  await page.getByLabel('Password').fill(password);
  await page.getByRole('button', { name: 'Sign in' }).click();
}

async function signOut(page) {
  await page.getByRole('button', { name: 'Sign out' }).click();
  await page.waitForURL(/\/console\/login/);
}

async function issueLicense(page, { product, tier, customer, seats, limits }) {
  await page.goto(base + '/console/licenses/new');
  await page.getByLabel('Product').fill(product);
  await page.getByLabel('Tier').fill(tier);
  await page.getByLabel('Customer (issued to)').fill(customer);
  if (seats) await page.getByLabel('Seats (max activations)').fill(String(seats));
  for (const [k, v] of Object.entries(limits || {})) await page.locator(`#limit_${k}`).fill(String(v));
  await page.getByRole('button', { name: 'Issue license' }).click();
  await page.waitForURL(/\/console\/licenses\/[^/?]+\?notice=issued/);
  check((await text(page, '.notice')) === 'License issued.', 'issuing shows a confirmation');
  return text(page, 'h1.key-title');
}

// Tests reach nothing outside this machine: every request to a host that is not loopback is
// refused by the context's router (refuseOtherHosts) and recorded. A scenario that expects
// the console to send the browser elsewhere (Stripe) catches that navigation with
// leaveFor, which records the URL as expected and returns it; any other refused request
// fails the scenario loudly, naming the URL.
const refused = [];
const expectedAway = new Set();

function isLoopback(u) {
  const url = new URL(u);
  if (url.protocol !== 'http:' && url.protocol !== 'https:' && url.protocol !== 'ws:' && url.protocol !== 'wss:') return true;
  const host = url.hostname.replace(/^\[|\]$/g, '');
  return host === 'localhost' || host === '::1' || /^127\./.test(host);
}

async function refuseOtherHosts(context) {
  await context.route((u) => !isLoopback(u.toString()), (route) => {
    refused.push(route.request().url());
    return route.abort('blockedbyclient');
  });
}

// leaveFor runs act (a click that should send the browser to another host) and returns the
// URL the browser was sent to, without letting it go there.
async function leaveFor(page, act) {
  const away = page.waitForRequest((r) => r.isNavigationRequest() && !isLoopback(r.url()));
  await act();
  const url = (await away).url();
  expectedAway.add(url);
  return url;
}

// waitForDelivery reloads an endpoint's page until its index-th newest delivery has the
// status (the worker delivers in the background).
async function waitForDelivery(page, index, status) {
  for (let i = 0; i < 100; i++) {
    const row = page.locator('tr.delivery').nth(index);
    if ((await row.count()) && (await row.getAttribute('data-status')) === status) return;
    await page.waitForTimeout(200);
    await page.reload();
  }
  throw new Error(`delivery ${index} never reached ${status}`);
}

// waitForAttempt reloads until the index-th newest delivery has an attempt.
async function waitForAttempt(page, index) {
  for (let i = 0; i < 100; i++) {
    const row = page.locator('tr.delivery').nth(index);
    if ((await row.count()) && (await row.locator('details.attempts').count())) return;
    await page.waitForTimeout(200);
    await page.reload();
  }
  throw new Error(`delivery ${index} never had an attempt`);
}

// releaseInPortal releases a seat on the portal page as its holder does: the seat's
// Release link, then the confirmation's one button.
async function releaseInPortal(page, instance) {
  await page.getByRole('link', { name: 'Release ' + instance, exact: true }).click();
  await page.waitForURL(/\/release\?instance_id=/);
  check((await text(page, '#release-title')) === `Release the seat ${instance}?`, 'Release asks for confirmation first');
  await page.getByRole('button', { name: 'Release seat' }).click();
  await page.waitForURL(/\?notice=seat-released$/);
  check((await text(page, '.notice')) === 'Seat released: the license can be activated on another device now.', 'releasing says so');
}

// overflow measures how far a page is wider than its viewport, and names the elements
// that stick out of it (none may: nothing scrolls sideways). What a scroll container of
// its own holds (the console's section links, a wide table in its card) scrolls there,
// not the page.
async function overflow(page) {
  return page.evaluate(() => {
    const vw = document.documentElement.clientWidth;
    const scrolled = (el) => {
      for (let a = el.parentElement; a && a !== document.body; a = a.parentElement) {
        if (['auto', 'scroll', 'hidden', 'clip'].includes(getComputedStyle(a).overflowX)) return true;
      }
      return false;
    };
    const name = (el) => `${el.tagName.toLowerCase()}.${el.className} right=${Math.round(el.getBoundingClientRect().right)}`;
    const wide = [...document.querySelectorAll('body *')].filter((el) => el.getBoundingClientRect().right > vw + 1);
    let out = wide.filter((el) => !scrolled(el)).slice(0, 5).map(name);
    // The page is wider and nothing outside a scroll container says why: something
    // positioned escaped one; name those.
    if (document.documentElement.scrollWidth > vw && out.length === 0) out = wide.filter((el) => !el.closest('nav')).slice(0, 5).map(name);
    return { clientWidth: vw, scrollWidth: document.documentElement.scrollWidth, out };
  });
}

async function checkFits(page, what) {
  const o = await overflow(page);
  check(o.scrollWidth <= o.clientWidth && o.out.length === 0,
    `${what} at ${o.clientWidth} px scrolls sideways: scrollWidth ${o.scrollWidth}; sticking out: ${o.out.join(', ')}`);
}

// inside reports whether the element's box lies within its container's.
async function inside(element, container) {
  const [e, c] = [await element.boundingBox(), await container.boundingBox()];
  return e.x >= c.x - 0.5 && e.x + e.width <= c.x + c.width + 0.5;
}


// Accessibility (WCAG 2.2 AA), measured in the page as a person meets it.

// focusedAlert waits for the page a refused form led to and returns what has the focus:
// the error summary (role=alert) with its text, whether it is in view, and its links.
async function focusedAlert(page) {
  await page.waitForLoadState('load');
  // The browser moves the focus to an autofocus element at a rendering update after the
  // load event, which a loaded machine can delay: wait for it (up to a bound that only a
  // page without it reaches), then read whatever has the focus.
  await page.waitForFunction(() => document.activeElement?.closest('[role="alert"]'), null, { timeout: 15000 }).catch(() => {});
  return page.evaluate(() => {
    const el = document.activeElement;
    const alert = el && el.closest('[role="alert"]');
    if (!alert) return { focused: el ? `${el.tagName}#${el.id}.${el.className}` : 'none' };
    const r = alert.getBoundingClientRect();
    return { text: alert.innerText.replace(/\s+/g, ' ').trim(), inView: r.top >= 0 && r.top < innerHeight,
      links: [...alert.querySelectorAll('a')].map((a) => a.getAttribute('href')) };
  });
}

// expectAlert checks that a refused form put the focus on an alert that is in view and
// says each of the messages, each linked to its field when fields are given.
async function expectAlert(page, what, messages, fields = []) {
  const a = await focusedAlert(page);
  check(a.text !== undefined, `${what}: the focus should be on the error summary (role=alert), it is on ${a.focused}`);
  for (const m of messages) check(a.text.includes(m), `${what}: the alert should say "${m}", it says "${a.text}"`);
  check(a.inView, `${what}: the alert is not in view`);
  for (const f of fields) check(a.links.includes('#' + f), `${what}: the alert should link to #${f}, it links to ${a.links}`);
}

// focusedNotice returns the text of the notice that has the focus ('' when none does) and
// the id of the section holding it.
async function focusedNotice(page) {
  await page.waitForLoadState('load');
  // As focusedAlert: the autofocus lands at a rendering update after the load event.
  await page.waitForFunction(() => document.activeElement?.matches('.notice'), null, { timeout: 15000 }).catch(() => {});
  return page.evaluate(() => {
    const el = document.activeElement;
    if (!el || !el.matches('.notice')) return { text: '', on: el ? `${el.tagName}.${el.className}` : 'none' };
    const r = el.getBoundingClientRect();
    return { text: el.innerText.trim(), section: el.closest('section')?.getAttribute('aria-labelledby') || '', inView: r.top >= 0 && r.bottom <= innerHeight };
  });
}

async function expectNotice(page, what, text, section) {
  const n = await focusedNotice(page);
  check(n.text === text, `${what}: the notice "${text}" should have the focus; the focus is on ${n.on || n.text}`);
  check(n.inView, `${what}: the focused notice is not in view`);
  if (section !== undefined) check(n.section === section, `${what}: the notice should be in the section ${section}, it is in "${n.section}"`);
}

// focusedText is the text (or label) of what has the focus.
async function focusedText(page) {
  // As focusedAlert: after a navigation the autofocus lands at a rendering update after
  // the load event; until then the body has the focus (and its text is the whole page).
  await page.waitForLoadState('load');
  await page.waitForFunction(() => document.activeElement && document.activeElement !== document.body, null, { timeout: 15000 }).catch(() => {});
  return page.evaluate(() => (document.activeElement?.innerText || document.activeElement?.value || '').trim());
}

// contrastIn measures, in the page, the contrast of what matches each selector against
// the background it sits on (composited through the ancestors' backgrounds): prop is
// "color" (text), "border" (the top border) or "outline" (measured against the surface
// around the element, where an offset ring is drawn). It returns the worst, named.
async function contrastIn(page, selector, prop) {
  return page.evaluate(({ selector, prop }) => {
    const parse = (c) => { const m = c.match(/rgba?\(([^)]+)\)/); if (!m) return null; const p = m[1].split(/[ ,/]+/).filter(Boolean).map(Number); return [p[0], p[1], p[2], p.length > 3 ? p[3] : 1]; };
    const blend = (fg, bg) => [0, 1, 2].map((i) => fg[i] * fg[3] + bg[i] * (1 - fg[3])).concat(1);
    const lum = (c) => { const f = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; }; return 0.2126 * f(c[0]) + 0.7152 * f(c[1]) + 0.0722 * f(c[2]); };
    const ratio = (a, b) => { const x = lum(a), y = lum(b); return (Math.max(x, y) + 0.05) / (Math.min(x, y) + 0.05); };
    const bgOf = (el) => { const stack = []; for (let e = el; e; e = e.parentElement) { const c = parse(getComputedStyle(e).backgroundColor); if (c && c[3] > 0) stack.push(c); if (c && c[3] >= 1) break; } let bg = [255, 255, 255, 1]; for (const c of stack.reverse()) bg = blend(c, bg); return bg; };
    let worst = { ratio: Infinity, what: `nothing matches ${selector}` };
    for (const el of document.querySelectorAll(selector)) {
      const r = el.getBoundingClientRect(); if (r.width < 1 || r.height < 1) continue;
      const cs = getComputedStyle(el);
      let fg, bg;
      if (prop === 'color') { bg = bgOf(el); fg = parse(cs.color); }
      if (prop === 'border') { bg = bgOf(el.parentElement); fg = parse(cs.borderTopColor); }
      if (prop === 'outline') {
        if (cs.outlineStyle === 'none' || parseFloat(cs.outlineWidth) < 2) { worst = { ratio: 0, what: `${el.tagName}.${el.className}: outline ${cs.outlineStyle} ${cs.outlineWidth}` }; continue; }
        bg = bgOf(el.parentElement); fg = parse(cs.outlineColor);
      }
      const cr = ratio(blend(fg, bg), bg);
      if (cr < worst.ratio) worst = { ratio: +cr.toFixed(2), what: `${el.tagName}.${el.className} "${(el.innerText || '').trim().slice(0, 30)}" ${prop} ${prop === 'color' ? cs.color : prop === 'border' ? cs.borderTopColor : cs.outlineColor} on rgb(${bg.slice(0, 3).map(Math.round)})` };
    }
    return worst;
  }, { selector, prop });
}

async function expectContrast(page, what, selector, prop, min) {
  const w = await contrastIn(page, selector, prop);
  check(w.ratio >= min, `${what}: contrast ${w.ratio}:1 < ${min}:1 (${w.what})`);
}

// ringOf focuses the element as a keyboard user does (the keyboard was used last, so the
// focus ring shows) and measures its ring.
async function expectRing(page, what, locator) {
  await page.keyboard.press('Shift');
  await locator.focus();
  await locator.evaluate((el) => el.setAttribute('data-ring', ''));
  await expectContrast(page, `the focus ring of ${what}`, '[data-ring]', 'outline', 3);
  await locator.evaluate((el) => el.removeAttribute('data-ring'));
}

// The scenario of one hosted tenant goes on after a failed part, so that one run names
// every part that fails (each throws on its first failed check).
async function parts(list) {
  const failed = [];
  for (const [name, run] of list) {
    try { await run(); } catch (err) { failed.push(`${name}: ${String(err.message || err).split('\n')[0]}`); }
  }
  check(failed.length === 0, `failed:\n  ${failed.join('\n  ')}`);
}

const scenarios = {
  // Self-hosted: admin key sign-in, issue, field errors, search, revoke.
  async selfhosted(page) {
    await page.goto(base + '/console/login');
    await shot(page, 'login');
    await signInWithKey(page, cfg.key);
    await shot(page, 'overview');

    // A refused form shows the API's message beside the field, and keeps what was typed.
    await page.goto(base + '/console/licenses/new');
    await page.getByLabel('Product').fill(cfg.product);
    await page.getByLabel('Customer (issued to)').fill(cfg.customer);
    await page.locator('#limit_seats').fill('-2');
    await page.getByRole('button', { name: 'Issue license' }).click();
    const tierError = await page.locator('#tier-error').innerText().catch(() => '');
    check(tierError.includes('tier'), `missing tier: expected the API's message beside Tier, got "${tierError}"`);
    check(await page.getByLabel('Product').inputValue() === cfg.product, 'the refused form keeps the product');
    check(await page.locator('#tier').getAttribute('aria-invalid') === 'true', 'the refused field is marked invalid');
    await page.getByLabel('Tier').fill('pro');
    await page.getByRole('button', { name: 'Issue license' }).click();
    const limitError = await page.locator('#limit_seats-error').innerText().catch(() => '');
    check(limitError.length > 0, 'a negative limit: the API\'s message shows beside that limit');
    await shot(page, 'issue-error');
    await page.locator('#limit_seats').fill('5');
    await page.getByLabel('Seats (max activations)').fill('3');
    await page.getByRole('button', { name: 'Issue license' }).click();
    await page.waitForURL(/\?notice=issued/);
    const key = await text(page, 'h1.key-title');

    // Find it by customer.
    await page.goto(base + '/console/licenses');
    await page.getByLabel('Customer (issued to)').fill(cfg.customer.slice(2, -3));
    await page.getByLabel('Customer (issued to)').press('Enter');
    await page.waitForURL(/issued_to=/);
    const rows = await page.locator('table.list tbody tr').count();
    check(rows === 1, `search by customer: 1 row expected, got ${rows}`);
    check((await text(page, 'table.list tbody tr td:first-child')) === key, 'search finds the issued key');

    // Find it by part of its key, pasted in lower case (support reads keys out of emails).
    await page.goto(base + '/console/licenses');
    await page.getByLabel('License key').fill(key.slice(3, -3).toLowerCase());
    await page.getByLabel('License key').press('Enter');
    await page.waitForURL(/[?&]key=/);
    const keyRows = await page.locator('table.list tbody tr').count();
    check(keyRows === 1, `search by part of the key: 1 row expected, got ${keyRows}`);
    check((await text(page, 'table.list tbody tr td:first-child')) === key, 'search by key finds the issued key');
    // The whole key finds it too; a key nobody has finds nothing.
    await page.goto(base + '/console/licenses?key=' + encodeURIComponent(key));
    check((await text(page, 'table.list tbody tr td:first-child')) === key, 'search by the whole key finds it');
    await page.goto(base + '/console/licenses?key=' + encodeURIComponent(key + 'X'));
    check(await page.locator('table.list tbody tr').count() === 0, 'a key nobody has lists no license');
    await page.goto(base + '/console/licenses');
    await shot(page, 'licenses');

    await page.getByRole('link', { name: key }).click();
    await page.waitForURL(new RegExp('/console/licenses/' + key));
    await shot(page, 'license');
    // Keyboard: the first Tab reaches the skip link, which jumps to the page's content;
    // buttons answer Enter.
    await page.keyboard.press('Tab');
    check(await page.evaluate(() => document.activeElement.textContent.trim()) === 'Skip to content', 'the first Tab reaches "Skip to content"');
    // Revoking asks first (a page, no script needed): the link changes nothing, Cancel
    // leaves the license active, the confirmation's one button revokes.
    await page.getByRole('link', { name: 'Revoke…' }).focus();
    await page.keyboard.press('Enter');
    await page.waitForURL(new RegExp('/console/licenses/' + key + '/revoke$'));
    check((await text(page, '#revoke-title')) === 'Revoke this license?', 'the Revoke link asks for confirmation first');
    check((await text(page, '.subtitle .badge')) === 'active', 'asking to revoke leaves the license active');
    await shot(page, 'revoke-confirm');
    await page.getByRole('link', { name: 'Cancel' }).click();
    await page.waitForURL(new RegExp('/console/licenses/' + key + '$'));
    check((await text(page, '.subtitle .badge')) === 'active', 'Cancel leaves the license active');
    await page.getByRole('link', { name: 'Revoke…' }).click();
    await page.getByRole('button', { name: 'Revoke license' }).focus();
    await page.keyboard.press('Enter');
    await page.waitForURL(/\?notice=revoked/);
    check((await text(page, '.subtitle .badge')) === 'revoked', 'after revoking, the badge says revoked');
    return { key };
  },

  // Accessibility (docs/console.md): refused forms, notices, confirmations, contrast,
  // the return after sign-in, lists past their end. The Go test issued cfg.licenseKey
  // (a long customer, a seat that counted "projects").
  async accessibility(page) {
    // The context's 20 s for every wait, as the other scenarios: a click that waits 5 s
    // for its element timed out on a machine busy with other work (load 9-10) and failed
    // a part whose page was right.
    const lic = base + '/console/licenses/' + cfg.licenseKey;
    await parts([
      ['sign-in: plain links, a refused key marked invalid', async () => {
        await page.goto(base + '/console/login');
        check(await page.locator('[role="tab"], [role="tablist"]').count() === 0, 'the sign-in modes are links, not tabs without a tab panel');
        check(await page.getByRole('link', { name: 'Email and password' }).count() === 1, 'the other sign-in mode is a link');
        await page.locator('#api_key').fill('kh_wrong');
        await page.locator('#api_key').press('Enter');
        await page.waitForLoadState('load');
        check(await page.locator('#api_key').getAttribute('aria-invalid') === 'true', 'a refused key: the field is marked invalid');
      }],
      ['after sign-in, back to the page the session ended on', async () => {
        await page.goto(base + '/console/licenses?page=99');
        const login = page.url();
        await page.locator('#api_key').fill(cfg.key);
        await page.locator('#api_key').press('Enter');
        await page.waitForLoadState('load');
        check(new URL(login).searchParams.get('next') === '/console/licenses?page=99', `without a session: sign-in with next, got ${login}`);
        check(page.url() === base + '/console/licenses?page=99', `signed in: back on the list's page 99, got ${page.url()}`);
      }],
      ['a page past the end of the list says so and links to the last page', async () => {
        if (!page.url().endsWith('/console/licenses?page=99')) await page.goto(base + '/console/licenses?page=99');
        const empty = await text(page, '.empty');
        check(empty.includes('past the end') && !empty.includes('No licenses yet'), `page 99 of 1: "${empty}"`);
        check(!(await text(page, '.pager')).includes('0–0'), 'the pager does not count 0–0');
        await page.getByRole('link', { name: 'Go to the last page' }).click();
        await page.waitForURL(/[?&]page=1$/);
        check(await page.locator('table.list tbody tr').count() === 1, 'the last page lists the license');
      }],
      ['a clipped value is whole for the keyboard and screen readers', async () => {
        await page.goto(base + '/console/licenses');
        const clipped = page.locator('td .clipped', { hasText: cfg.customer.slice(0, 20) }).first();
        const full = await clipped.evaluate((el) => [...el.querySelectorAll('span')].filter((s) => s.getAttribute('aria-hidden') !== 'true').map((s) => s.textContent).join(''));
        check(full === cfg.customer, `the whole customer is in the accessible text, got "${full.slice(0, 60)}"`);
        await page.keyboard.press('Shift');
        await clipped.focus();
        check(await clipped.evaluate((el) => el === document.activeElement), 'the clipped value takes the keyboard focus');
        check(await clipped.evaluate((el) => el.innerText.trim()) === cfg.customer, 'with focus, the whole value shows');
      }],
      ['the console 404 keeps the header and the navigation', async () => {
        const resp = await page.goto(base + '/console/no-such-page');
        check(resp.status() === 404, `404 expected, got ${resp.status()}`);
        check(await page.locator('nav[aria-label="Console"]').count() === 1 && await page.locator('header.topbar').count() === 1, 'the signed-in 404 has the header and navigation');
      }],
      ['issue: every missing field at once, announced and focused', async () => {
        await page.goto(base + '/console/licenses/new');
        await page.getByRole('button', { name: 'Issue license' }).click();
        await expectAlert(page, 'an empty new license', ['product_id is required', 'tier is required', 'issued_to is required'], ['product_id', 'tier', 'issued_to']);
      }],
      ['license terms: Seats 0', async () => {
        await page.goto(lic);
        await page.locator('#max_activations').fill('0');
        await page.getByRole('button', { name: 'Save terms' }).click();
        await expectAlert(page, 'terms with 0 seats', ['max_activations'], ['max_activations']);
      }],
      ['Save notes: the notice has the focus, in the Notes section', async () => {
        await page.goto(lic);
        await page.locator('#notes').fill('Renewal due in Q3.');
        await page.getByRole('button', { name: 'Save notes' }).click();
        await page.waitForURL(/notice=notes/);
        await expectNotice(page, 'after Save notes', 'Notes saved.', 'notes-title');
      }],
      ['usage Reset asks first', async () => {
        await page.goto(lic);
        await page.getByRole('link', { name: 'Reset projects' }).click();
        await page.waitForURL(/\/usage\/reset\?metric=projects$/);
        check((await text(page, '#reset-usage-title')) === 'Reset the usage of projects?', 'Reset asks for confirmation first');
        check(await focusedText(page) === 'Reset usage', `the question's button has the focus, not "${await focusedText(page)}"`);
        check((await page.locator('section[aria-labelledby="usage-title"] tbody td').nth(1).innerText()).startsWith('1'), 'asking resets nothing');
        await page.getByRole('button', { name: 'Reset usage' }).click();
        await page.waitForURL(/notice=usage-reset/);
        await expectNotice(page, 'after Reset usage', 'Usage reset.', 'usage-title');
        check((await page.locator('section[aria-labelledby="usage-title"] tbody td').nth(1).innerText()).startsWith('0'), 'the confirmed reset zeroes the usage');
      }],
      ['revoke: the notice has the focus', async () => {
        await page.goto(lic + '/revoke');
        check(await focusedText(page) === 'Revoke license', 'the revoke question\'s button has the focus');
        await page.getByRole('button', { name: 'Revoke license' }).click();
        await page.waitForURL(/notice=revoked/);
        await expectNotice(page, 'after revoking', 'License revoked.');
      }],
      ['API keys: an empty name, the delete question, the notice', async () => {
        await page.goto(base + '/console/api-keys');
        await page.getByRole('button', { name: 'Create key' }).click();
        await expectAlert(page, 'an API key without a name', ['name is required'], ['name']);
        await page.getByLabel('Name').fill('Temporary');
        await page.getByRole('button', { name: 'Create key' }).click();
        await page.getByRole('link', { name: 'Continue to the keys' }).click();
        await page.getByRole('link', { name: 'Delete Temporary' }).click();
        await page.waitForURL(/\/delete$/);
        check(await focusedText(page) === 'Delete key', `the delete question's button has the focus, not "${await focusedText(page)}"`);
        await page.getByRole('button', { name: 'Delete key' }).click();
        await page.waitForURL(/notice=deleted/);
        await expectNotice(page, 'after deleting a key', 'API key deleted: it no longer works.');
      }],
      ['Releases: Register empty', async () => {
        await page.goto(base + '/console/releases');
        await page.locator('#register summary').click();
        await page.getByRole('button', { name: 'Register release' }).click();
        await expectAlert(page, 'an empty release', ['is required']);
      }],
      ['Settings: two different passwords', async () => {
        await page.goto(base + '/console/settings');
        await page.getByLabel('New password').fill(cfg.password);
        await page.getByLabel('Repeat it').fill(cfg.password + 'x');
        await page.getByRole('button', { name: 'Save password' }).click();
        await expectAlert(page, 'two different passwords', ['The two passwords differ'], ['confirm']);
      }],
      ['contrast: muted text, input borders, focus rings', async () => {
        await page.goto(lic);
        await expectContrast(page, 'muted text on the license page', '.muted, .hint, .empty, th, .facts dt, .crumbs', 'color', 4.5);
        await expectContrast(page, 'input borders', 'input:not([type="hidden"]):not([type="checkbox"]), select, textarea', 'border', 3);
        await expectRing(page, 'a text field', page.locator('#notes'));
        await expectRing(page, 'a button', page.getByRole('button', { name: 'Save terms' }));
        await expectRing(page, 'a navigation link', page.locator('nav.sidenav a', { hasText: 'Releases' }));
        await expectRing(page, 'Sign out on the dark bar', page.getByRole('button', { name: 'Sign out' }));
        await page.goto(base + '/console/licenses?page=99');
        await expectContrast(page, 'muted text on the list', '.muted, .hint, .empty, th', 'color', 4.5);
        await expectRing(page, 'a select', page.locator('#status'));
      }],
      ['a foreign next is refused', async () => {
        for (const next of ['//evil.example/console/', 'https://evil.example/console/']) {
          await page.context().clearCookies();
          await page.goto(base + '/console/login?next=' + encodeURIComponent(next));
          await page.locator('#api_key').fill(cfg.key);
          await page.locator('#api_key').press('Enter');
          await page.waitForURL(base + '/console/');
        }
      }],
    ]);
    return {};
  },

  // Hosted, part 1: API key sign-in, set a password, sign in with it, issue a license.
  async hosted1(page) {
    await signInWithKey(page, cfg.key);
    await page.goto(base + '/console/settings');
    await page.getByLabel('New password').fill(cfg.password);
    await page.getByLabel('Repeat it').fill(cfg.password + 'x');
    await page.getByRole('button', { name: 'Save password' }).click();
    check((await page.locator('#confirm-error').innerText()).includes('differ'), 'mismatched passwords: error beside the second field');
    await page.getByLabel('New password').fill('short');
    await page.getByLabel('Repeat it').fill('short');
    await page.getByRole('button', { name: 'Save password' }).click();
    check((await page.locator('#password-error').innerText()).includes('at least 12'), 'a short password: the API\'s message beside the field');
    await page.getByLabel('New password').fill(cfg.password);
    await page.getByLabel('Repeat it').fill(cfg.password);
    await page.getByRole('button', { name: 'Save password' }).click();
    await page.waitForURL(/notice=password-set/);
    await shot(page, 'settings');
    await signOut(page);

    await signInWithPassword(page, cfg.email, cfg.password + 'wrong');
    check((await text(page, '.form-error')) === 'Invalid credentials', 'a wrong password reads "Invalid credentials"');
    await signInWithPassword(page, 'nobody-' + cfg.email, cfg.password);
    check((await text(page, '.form-error')) === 'Invalid credentials', 'an unknown email reads the same "Invalid credentials"');
    await signInWithPassword(page, cfg.email, cfg.password);
    await page.waitForURL(base + '/console/');

    const key = await issueLicense(page, { product: cfg.product, tier: 'pro', customer: cfg.customer, seats: 2, limits: { api_calls_per_day: 1000 } });
    const portal = await page.locator('#portal-link').inputValue();
    check(portal.startsWith(base + '/portal/'), `the license page shows a portal link, got "${portal}"`);
    return { key, portal };
  },

  // Hosted, part 2 (the Go test activated two seats): seats, release, export, rotation.
  async hosted2(page) {
    await signInWithPassword(page, cfg.email, cfg.password);
    await page.waitForURL(base + '/console/');
    await page.goto(base + '/console/licenses/' + cfg.licenseKey);
    const seats = await page.locator('section[aria-labelledby="seats-title"] tbody tr').count();
    check(seats === 2, `two seats expected on the license page, got ${seats}`);
    await shot(page, 'license-seats');
    // Deactivating a seat asks first; until confirmed, both seats stay.
    await page.getByRole('link', { name: 'Deactivate device-a' }).click();
    await page.waitForURL(/seats\/deactivate\?instance_id=device-a/);
    check((await text(page, '#deactivate-title')) === 'Deactivate the seat device-a?', 'Deactivate asks for confirmation first');
    check(await page.locator('section[aria-labelledby="seats-title"] tbody tr').count() === 2, 'asking to deactivate frees no seat');
    await shot(page, 'seat-confirm');
    await page.getByRole('button', { name: 'Deactivate seat' }).click();
    await page.waitForURL(/notice=seat-deactivated/);
    check(await page.locator('section[aria-labelledby="seats-title"] tbody tr').count() === 1, 'one seat left after deactivating');

    await page.getByRole('button', { name: 'Reissue token for device-b' }).click();
    const token = await page.locator('#new-token').inputValue();
    check(token.length > 20, 'reissuing shows the new token once');

    // Register a release; a bad URL first shows the API's message beside the field.
    await page.goto(base + '/console/releases');
    await page.locator('#register summary').click();
    const reg = page.locator('#register');
    await reg.getByLabel('Product').fill(cfg.product);
    await reg.getByLabel('Version').fill('2.1.0');
    await reg.getByLabel('Platform').fill('linux-x64');
    await reg.getByLabel('Download URL').fill('ftp://example.com/app.tgz');
    await page.getByRole('button', { name: 'Register release' }).click();
    const urlError = await page.locator('#artifact_url-error').innerText().catch(() => '');
    check(urlError === 'artifact_url must be a valid http(s) URL', `bad artifact_url: the API's message beside the field, got "${urlError}"`);
    await page.locator('#register').getByLabel('Download URL').fill('https://downloads.example.com/app-2.1.0.tgz');
    await page.getByRole('button', { name: 'Register release' }).click();
    await page.waitForURL(/notice=release-registered/);
    check((await text(page, 'table.list tbody tr td:nth-child(2)')) === '2.1.0', 'the release is listed');
    await shot(page, 'releases');

    // The data export downloads as a file with the dated name.
    await page.goto(base + '/console/settings');
    const [download] = await Promise.all([
      page.waitForEvent('download'),
      page.getByRole('link', { name: 'Download data export' }).click(),
    ]);
    const exportPath = join(cfg.tmp, 'export.json');
    await download.saveAs(exportPath);

    // Rotation: the new key is shown once and this session ends.
    await page.getByRole('button', { name: 'Rotate the API key' }).click();
    const newKey = await page.locator('#new-api-key').inputValue();
    check(newKey.startsWith('kh_'), 'the rotated key is shown');
    await shot(page, 'key-rotated');
    await page.goto(base + '/console/licenses');
    check(page.url().includes('/console/login'), `after rotation the old session must be gone, got ${page.url()}`);
    return { exportPath, exportName: download.suggestedFilename(), newKey };
  },

  // Billing on Free: the quota, and the upgrade goes to Stripe Checkout.
  async billing1(page) {
    await signInWithKey(page, cfg.key);
    await page.getByRole('link', { name: 'Billing' }).click();
    await page.waitForURL(base + '/console/billing');
    check((await text(page, '.plan-name')).startsWith('Free'), 'a new account is on Free');
    check((await page.content()).includes('1 of 5'), 'the quota shows 1 of 5 active licenses');
    await shot(page, 'billing');
    await page.getByLabel('Annual').check();
    const url = await leaveFor(page, () => page.getByRole('button', { name: 'Upgrade to Pro' }).click());
    return { url };
  },

  // Billing on Pro: manage or cancel goes to Stripe's billing portal.
  async billing2(page) {
    await signInWithKey(page, cfg.key);
    await page.goto(base + '/console/billing');
    check((await text(page, '.plan-name')).startsWith('Pro'), 'after the upgrade the plan is Pro');
    check((await page.content()).includes('1 of 1000'), 'the quota shows 1 of 1000');
    const url = await leaveFor(page, () => page.getByRole('button', { name: 'Manage or cancel' }).click());
    return { url };
  },

  // Storefront set-up in the console: connect, save the secret, add a mapping.
  async storefront1(page) {
    await signInWithKey(page, cfg.key);
    await page.getByRole('link', { name: 'Storefront' }).click();
    await page.waitForURL(base + '/console/storefront');
    await page.getByRole('button', { name: 'Connect Stripe' }).click();
    await page.waitForURL(/notice=connected/);
    const callback = await page.locator('input[aria-label^="Callback URL"]').inputValue();
    check(/\/v1\/webhooks\/storefront\/[^/]+$/.test(callback), `the callback URL is shown, got "${callback}"`);
    check((await text(page, 'td .badge')) === 'pending', 'a new webhook is pending');
    await page.getByLabel('Signing secret').fill('not-a-secret');
    await page.getByRole('button', { name: 'Save and activate' }).click();
    const secretError = await page.locator('#signing_secret-error').innerText().catch(() => '');
    check(secretError.length > 0, 'a malformed signing secret: the API\'s message beside the field');
    await page.getByLabel('Signing secret').fill(cfg.secret);
    await page.getByRole('button', { name: 'Save and activate' }).click();
    await page.waitForURL(/notice=secret-saved/);
    check((await text(page, 'td .badge')) === 'active', 'saving the secret activates the webhook');

    await page.locator('#add-mapping summary').click();
    const form = page.locator('#add-mapping');
    await form.getByLabel('Payment link id or service_ref').fill(cfg.link);
    await form.getByLabel('Product').fill(cfg.product);
    await form.getByLabel('Seats', { exact: true }).fill('2');
    await page.getByRole('button', { name: 'Add mapping' }).click();
    const tierError = await page.locator('#tier-error').innerText().catch(() => '');
    check(tierError.includes('tier'), `a mapping without a tier: the API's message beside Tier, got "${tierError}"`);
    await page.locator('#add-mapping').getByLabel('Tier').fill('pro');
    await page.getByRole('button', { name: 'Add mapping' }).click();
    await page.waitForURL(/notice=mapping-added/);
    check((await page.content()).includes(cfg.link), 'the mapping is listed');
    return { webhookId: callback.split('/').pop() };
  },

  // A mapping's every term shows in the list and is set in the form: a one-time
  // purchase's duration, a subscription's grace, what a refund or dispute does.
  async storefrontMappings(page) {
    await signInWithKey(page, cfg.key);
    await page.goto(base + '/console/storefront');
    const row = (ref) => page.locator('section[aria-labelledby="mappings-title"] tbody tr', { hasText: ref });
    const listed = (await row(cfg.apiRef).innerText()).replace(/\s+/g, ' ');

    await page.locator('#add-mapping summary').click();
    const form = page.locator('#add-mapping');
    await form.getByLabel('Checkout metadata.service_ref').check();
    await form.getByLabel('Payment link id or service_ref').fill(cfg.ref);
    await form.getByLabel('Product').fill(cfg.product);
    await form.getByLabel('Tier').fill('pro');
    await form.getByLabel('Subscription grace in days').fill('120');
    await form.getByLabel('A full refund or a dispute').selectOption('keep');
    await page.getByRole('button', { name: 'Add mapping' }).click();
    const graceError = await page.locator('#renewal_grace_days-error').innerText().catch(() => '');
    check(graceError === 'renewal_grace_days must be an integer from 0 to 90', `a grace of 120 days: the API's message beside the field, got "${graceError}"`);
    check(await page.locator('#on_refund').inputValue() === 'keep', 'the refused form keeps the choice made');
    await form.getByLabel('Subscription grace in days').fill('7');
    await page.getByRole('button', { name: 'Add mapping' }).click();
    await page.waitForURL(/notice=mapping-added/);
    const added = (await row(cfg.ref).innerText()).replace(/\s+/g, ' ');
    return { listed, added };
  },

  // Paid purchases that got no license lead the storefront page, with what to do and a
  // link to those deliveries.
  async storefrontAttention(page) {
    await signInWithKey(page, cfg.key);
    await page.goto(base + '/console/storefront');
    const box = page.locator('#unfulfilled');
    check(await box.count() === 1, 'the unfulfilled purchases are shown');
    const first = await page.locator('main section').first().getAttribute('id');
    check(first === 'unfulfilled', `they come first on the page, got section ${first}`);
    const text = (await box.innerText()).replace(/\s+/g, ' ');
    await shot(page, 'storefront-attention');
    await box.getByRole('link', { name: /over your plan/ }).click();
    await page.waitForURL(/outcome=over_quota/);
    const rows = page.locator('section[aria-labelledby="deliveries-title"] tbody tr');
    return { text, rows: await rows.count() };
  },

  // After a sale: the delivery by outcome, and its license.
  async storefront2(page) {
    await signInWithKey(page, cfg.key);
    await page.goto(base + '/console/storefront');
    await page.getByLabel('Outcome').selectOption('issued');
    await page.getByRole('button', { name: 'Filter' }).click();
    await page.waitForURL(/outcome=issued/);
    const rows = page.locator('section[aria-labelledby="deliveries-title"] tbody tr');
    check(await rows.count() === 1, `one issued delivery expected, got ${await rows.count()}`);
    await shot(page, 'storefront');
    await page.getByLabel('Outcome').selectOption('unmapped');
    await page.getByRole('button', { name: 'Filter' }).click();
    await page.waitForURL(/outcome=unmapped/);
    check(await rows.count() === 0, 'no unmapped delivery');
    await page.getByLabel('Outcome').selectOption('issued');
    await page.getByRole('button', { name: 'Filter' }).click();
    await page.waitForURL(/outcome=issued/);
    await page.locator('section[aria-labelledby="deliveries-title"] tbody tr td a.mono').click();
    await page.waitForURL(/\/console\/licenses\//);
    return { key: await text(page, 'h1.key-title') };
  },

  // Another tenant opens the first tenant's license by URL.
  async isolation(page) {
    await signInWithKey(page, cfg.key);
    const resp = await page.goto(base + '/console/licenses/' + cfg.licenseKey);
    check(resp.status() === 404, `another tenant's license must be 404, got ${resp.status()}`);
    check((await page.content()).includes('License key not found'), 'the page says the license was not found');
    check(!(await page.content()).includes(cfg.customer), 'nothing of the other license shows');
    return {};
  },

  // Leases (docs/leases.md): a product's policies, the license page's seat leases and
  // bindings, lease-key rotation, and the portal's lease end and release.
  async leases(page) {
    await signInWithKey(page, cfg.key);
    await page.getByRole('link', { name: 'Leases', exact: true }).click();
    await page.waitForURL(base + '/console/leases');
    const kidsBefore = await page.locator('table tbody tr').count();
    check(kidsBefore === 1, `one lease key listed before rotation, got ${kidsBefore}`);
    await page.locator('#product_id').fill(cfg.product);
    await page.locator('#product_id').press('Enter');
    await page.waitForURL(base + '/console/products/' + cfg.product);
    check((await text(page, 'table tbody tr td:first-child')) === '*', 'the product page lists the default policy');
    // Out of bounds: the API's message beside the field, the form kept.
    await page.getByLabel('Tier (* for the product\'s default)').fill('enterprise');
    await page.getByLabel('Lease (seconds, 60 … 7776000)').fill('30');
    await page.getByRole('button', { name: 'Save policy' }).click();
    const ttlError = await page.locator('#lease_ttl_seconds-error').innerText().catch(() => '');
    check(ttlError.includes('lease_ttl_seconds'), `a 30 s lease: the API's message beside the field, got "${ttlError}"`);
    check(await page.locator('#tier').inputValue() === 'enterprise', 'the refused form keeps the tier');
    await page.getByLabel('Lease (seconds, 60 … 7776000)').fill('3600');
    await page.getByLabel('Entitlements (comma-separated)').fill('export.pdf, sync');
    await page.getByLabel('Machine binding').selectOption('most');
    await page.getByRole('button', { name: 'Save policy' }).click();
    await page.waitForURL(/\?notice=policy-saved/);
    check((await page.locator('table tbody tr').count()) === 2, 'the saved policy is listed next to the default');
    await shot(page, 'product');

    // The license page: the floating seat's lease end and its binding.
    await page.goto(base + '/console/licenses/' + cfg.licenseKey);
    const row = page.locator('#seats-title ~ table tbody tr').first();
    const cells = await row.locator('td').allInnerTexts();
    check(cells[0] === cfg.instance, `the seat row names ${cfg.instance}, got ${cells[0]}`);
    check(/\d{4}-\d{2}-\d{2} \d{2}:\d{2} UTC/.test(cells[2]), `the seat row shows its lease end, got "${cells[2]}"`);
    check(cells[3].includes('disk=d1'), `the seat row shows the bound components, got "${cells[3]}"`);
    const portal = await page.locator('#portal-link').inputValue();

    // Rotation: the old key stays, retiring.
    await page.goto(base + '/console/leases');
    await page.getByLabel('Old key verifies for (seconds; empty: the longest lease plus a day)').fill('3600');
    await page.getByRole('button', { name: 'Rotate lease key' }).click();
    await page.waitForURL(/\?notice=lease-key-rotated/);
    const statuses = await page.locator('table tbody tr td:nth-child(2)').allInnerTexts();
    check(statuses.join(',') === 'active,retiring', `after rotation: active and retiring keys, got ${statuses}`);
    await shot(page, 'leases');
    await signOut(page);

    // The portal: when the lease ends, and release frees the seat.
    await page.goto(portal);
    const pcells = await page.locator('#seats-title ~ table tbody tr').first().locator('td').allInnerTexts();
    check(/UTC/.test(pcells[2]), `the portal shows the seat's lease end, got "${pcells[2]}"`);
    await releaseInPortal(page, cfg.instance);
    return { kids: statuses.length };
  },

  // The end-user portal: no console session, only the link.
  async portal(page) {
    const resp = await page.goto(cfg.portal);
    check(resp.status() === 200, `portal link: 200 expected, got ${resp.status()}`);
    check((await text(page, 'h1')) === cfg.product, 'the portal shows the product');
    const before = await page.locator('section[aria-labelledby="seats-title"] tbody tr').count();
    await shot(page, 'portal');
    const [lic] = await Promise.all([
      page.waitForEvent('download'),
      page.getByRole('link', { name: 'Download license file (.lic)' }).click(),
    ]);
    const licPath = join(cfg.tmp, 'license.lic');
    await lic.saveAs(licPath);
    const [off] = await Promise.all([
      page.waitForEvent('download'),
      page.getByRole('link', { name: 'Download offline license (JSON)' }).click(),
    ]);
    const offlinePath = join(cfg.tmp, 'offline.json');
    await off.saveAs(offlinePath);
    await releaseInPortal(page, cfg.instance);
    const after = await page.locator('section[aria-labelledby="seats-title"] tbody tr').count();
    check(after === before - 1, `releasing in the portal frees one seat (${before} -> ${after})`);
    return { licPath, licName: lic.suggestedFilename(), offlinePath };
  },

  // Webhooks: create an endpoint (the secret shows once), ping it and watch the delivery
  // succeed, break the receiver and see the failed attempt, mend it and redeliver.
  async webhooks(page) {
    await signInWithKey(page, cfg.key);
    await page.getByRole('link', { name: 'Webhooks' }).click();
    await page.waitForURL(base + '/console/webhooks');
    // A refused form: the API's message beside the field.
    await page.getByLabel('URL').fill('ftp://example.com/hook');
    await page.getByRole('button', { name: 'Add endpoint' }).click();
    const urlError = await page.locator('#url-error').innerText().catch(() => '');
    check(urlError.includes('http'), `a non-http URL: expected the API's message beside URL, got "${urlError}"`);
    await page.getByLabel('URL').fill(cfg.receiver);
    await page.getByLabel('Events').fill('license., ping');
    await page.getByRole('button', { name: 'Add endpoint' }).click();
    const eventsError = await page.locator('#events-error').innerText().catch(() => '');
    check(eventsError.includes('events[1] must be an event type'), `an unknown type: expected the message beside Events, got "${eventsError}"`);
    // A type no other test causes: on the shared stack, "*" would bring other tests'
    // events between the pings, and "the newest delivery" would not be ours.
    await page.getByLabel('Events').fill('webhook_endpoint.disabled');
    await page.getByLabel('Description (optional)').fill('Browser test receiver');
    await page.getByRole('button', { name: 'Add endpoint' }).click();
    const secret = await page.locator('#webhook-secret').inputValue();
    check(secret.startsWith('whsec_'), `the new secret shows once, got "${secret}"`);
    await shot(page, 'webhook-secret');
    await page.getByRole('link', { name: 'Continue to the endpoint' }).click();
    await page.waitForURL(/\/console\/webhooks\/we_/);
    const endpoint = page.url().split('/').pop().split('?')[0];
    check(!(await page.content()).includes(secret), 'the secret is not on the endpoint page');
    await page.goto(base + '/console/webhooks');
    check(!(await page.content()).includes(secret), 'the secret is not on the list page');
    check((await page.locator('table.list tbody tr').count()) === 1, 'the list shows the endpoint');
    await page.getByRole('link', { name: cfg.receiver }).click();

    // Ping: the delivery shows, and succeeds.
    await page.getByRole('button', { name: 'Send a ping' }).click();
    await page.waitForURL(/notice=pinged/);
    await waitForDelivery(page, 0, 'succeeded');
    await shot(page, 'webhook-delivered');

    // Break the receiver: the next ping's attempt fails with the receiver's 500.
    await fetch(cfg.control + '/break', { method: 'POST' });
    await page.getByRole('button', { name: 'Send a ping' }).click();
    await page.waitForURL(/notice=pinged/);
    await waitForAttempt(page, 0);
    const row = page.locator('tr.delivery').first();
    check((await row.getAttribute('data-status')) === 'pending', 'a failed attempt leaves the delivery pending (retried)');
    await row.locator('summary').click();
    const attempt = await row.locator('tr.attempt').first().innerText();
    check(attempt.includes('500') && attempt.includes('answered HTTP 500'), `the failed attempt shows the 500, got "${attempt}"`);
    await shot(page, 'webhook-failed');
    const failedEvent = (await row.locator('td').first().innerText()).trim();

    // Mend it. A ping is in no log, so its Redeliver says so and sends nothing (addendum
    // §11: a ping goes to its endpoint only); a new ping then succeeds. Redelivering an
    // event of the log is below, from the Events page.
    await fetch(cfg.control + '/mend', { method: 'POST' });
    await row.getByRole('button', { name: 'Redeliver ' + failedEvent }).click();
    await page.waitForURL(/notice=not-in-log/);
    const notice = await page.locator('[role="status"]').first().innerText().catch(() => '');
    check(notice.includes('cannot be redelivered') && notice.includes('nothing was sent'), `redelivering a ping: expected the notice that it is not in the log, got "${notice}"`);
    check((await page.locator('tr.delivery').first().locator('td').first().innerText()).trim() === failedEvent, 'no delivery was added for the ping');
    await page.getByRole('button', { name: 'Send a ping' }).click();
    await page.waitForURL(/notice=pinged/);
    await waitForDelivery(page, 0, 'succeeded');

    // Disable and enable.
    await page.getByRole('button', { name: 'Disable' }).click();
    await page.waitForURL(/notice=disabled/);
    check((await text(page, '#endpoint-state')).startsWith('disabled'), 'the endpoint shows disabled');
    await page.getByRole('button', { name: 'Enable' }).click();
    await page.waitForURL(/notice=enabled/);
    check((await text(page, '#endpoint-state')) === 'enabled', 'the endpoint shows enabled again');

    // The event log: find the license the test issued, read its JSON, send it to the
    // endpoint (it was created after the change, so it has no delivery of it yet).
    await page.getByRole('link', { name: 'Events' }).click();
    await page.waitForURL(base + '/console/events');
    await page.getByLabel('License key').fill(cfg.license);
    await page.getByRole('button', { name: 'Filter' }).click();
    await page.waitForURL(/license_key=/);
    const rows = page.locator('tr.event');
    check((await rows.count()) === 1, `filtering by the license shows its one event, got ${await rows.count()}`);
    check((await rows.first().locator('td').nth(1).innerText()).trim() === 'license.issued', 'the event is license.issued');
    await rows.first().locator('a').click();
    await page.waitForURL(/\/console\/events\/evt_/);
    const json = await text(page, '#event-json');
    check(json.includes(cfg.license) && json.includes('"type": "license.issued"'), `the event's JSON shows, got ${json.slice(0, 200)}`);
    await shot(page, 'event');
    await page.getByLabel('Send it again to').selectOption(endpoint);
    await page.getByRole('button', { name: 'Redeliver' }).click();
    await page.waitForURL(/notice=redelivered/);
    for (let i = 0; i < 100 && (await page.locator('tr.delivery[data-status="succeeded"]').count()) === 0; i++) {
      await page.waitForTimeout(200);
      await page.reload();
    }
    check((await page.locator('tr.delivery[data-status="succeeded"]').count()) === 1, 'the event page shows its delivery, succeeded');

    // Rolling the secret with 999 hours: the alert names the problem and has the focus.
    await page.goto(base + '/console/webhooks/' + endpoint);
    await page.locator('summary', { hasText: 'Roll the secret' }).click();
    await page.getByLabel('Keep the old secret for (hours, 0-168)').fill('999');
    await page.getByRole('button', { name: 'Roll secret' }).click();
    await expectAlert(page, 'rolling with 999 hours', ['Keep the old secret between 0 and 168 hours'], ['expire_old_after_hours']);
    // Deleting the endpoint asks first, its button focused; Cancel keeps it.
    await page.getByRole('link', { name: 'Delete endpoint…' }).click();
    await page.waitForURL(/\/delete$/);
    check((await text(page, '#delete-title')) === `Delete the endpoint ${cfg.receiver}?`, 'Delete endpoint asks for confirmation first');
    check(await focusedText(page) === 'Delete endpoint', 'the question\'s button has the focus');
    await page.getByRole('link', { name: 'Cancel' }).click();
    await page.waitForURL(base + '/console/webhooks/' + endpoint);
    await page.getByRole('link', { name: 'Delete endpoint…' }).click();
    await page.getByRole('button', { name: 'Delete endpoint' }).click();
    await page.waitForURL(/\/console\/webhooks\?notice=deleted$/);
    await expectNotice(page, 'after deleting the endpoint', 'Endpoint deleted.');
    return { secret, endpoint, failedEvent };
  },

  // API keys: create a read key (shown once), a full key, see both listed without the
  // keys, delete the read key after a confirmation.
  async apikeys(page) {
    await signInWithKey(page, cfg.key);
    await page.getByRole('link', { name: 'API keys' }).click();
    await page.waitForURL(base + '/console/api-keys');
    check((await text(page, 'h1')) === 'API keys', 'the nav link opens the API keys page');
    check((await text(page, '.empty')) === 'No API keys yet.', 'a new tenant has no extra keys');

    // A refused form shows the API's message beside the field.
    await page.getByRole('button', { name: 'Create key' }).click();
    check((await page.locator('#name-error').innerText()) === 'name is required', 'no name: the API\'s message beside Name');

    const created = {};
    for (const [name, scope] of [['Dashboards', 'read'], ['Backend', 'full']]) {
      await page.getByLabel('Name').fill(name);
      await page.getByLabel('Scope').selectOption(scope);
      await page.getByRole('button', { name: 'Create key' }).click();
      check((await text(page, 'h1')) === 'API key created', 'creating shows the key');
      created[scope] = await page.locator('#api-key').inputValue();
      check(created[scope].startsWith('kh_'), `the key is shown once, got "${created[scope]}"`);
      await shot(page, 'api-key-created');
      await page.getByRole('link', { name: 'Continue to the keys' }).click();
      await page.waitForURL(base + '/console/api-keys');
    }
    const rows = page.locator('tr.api-key');
    check((await rows.count()) === 2, `two keys listed, got ${await rows.count()}`);
    const list = await page.locator('table.list').innerText();
    check(!list.includes(created.read) && !list.includes(created.full), 'the list never shows a key');
    check(list.includes(created.read.slice(0, 11)), 'the list shows each key\'s prefix');
    await shot(page, 'api-keys');

    await page.getByRole('link', { name: 'Delete Dashboards' }).click();
    check((await text(page, '#confirm-title')) === 'Delete the API key “Dashboards”?', 'deleting asks for a confirmation first');
    check((await rows.count()) === 2, 'nothing is deleted before the confirmation');
    await page.getByRole('button', { name: 'Delete key' }).click();
    await page.waitForURL(/notice=deleted/);
    check((await text(page, '.notice')) === 'API key deleted: it no longer works.', 'deleting confirms it');
    check((await rows.count()) === 1, 'one key left');
    check((await text(page, 'tr.api-key td:first-child')) === 'Backend', 'the full key is the one left');
    return { readKey: created.read, fullKey: created.full };
  },

  // The portal on a phone (375 px) and on a desktop: nothing scrolls sideways, words are
  // not split, a long product_id wraps; releasing a seat asks first (by keyboard too).
  async portalLayout(page) {
    await page.setViewportSize({ width: 375, height: 800 });
    const resp = await page.goto(cfg.portal);
    check(resp.status() === 200, `portal link: 200 expected, got ${resp.status()}`);
    await checkFits(page, 'the portal');
    const seats = page.locator('section[aria-labelledby="seats-title"]');
    const release = page.getByRole('link', { name: 'Release ' + cfg.instance, exact: true });
    check(await inside(release, seats), 'the Release link stays inside the seats card at 375 px');
    // No word is split across lines: each visible word is one line high.
    const split = await page.evaluate(() => {
      const bad = [];
      for (const td of document.querySelectorAll('main td, main .hint')) {
        const walker = document.createTreeWalker(td, NodeFilter.SHOW_TEXT);
        for (let n = walker.nextNode(); n; n = walker.nextNode()) {
          const re = /[A-Za-z]{4,}/g;
          for (let m; (m = re.exec(n.data));) {
            const range = document.createRange();
            range.setStart(n, m.index); range.setEnd(n, m.index + m[0].length);
            if (range.getClientRects().length > 1) bad.push(m[0]);
          }
        }
      }
      return bad;
    });
    check(split.length === 0, `words split across lines at 375 px: ${split.join(', ')}`);
    await shot(page, 'portal-phone');

    // Keyboard only: Tab to the seat's Release, Enter asks; nothing is freed yet.
    let reached = false;
    for (let i = 0; i < 20 && !reached; i++) {
      await page.keyboard.press('Tab');
      reached = await page.evaluate((label) => document.activeElement.getAttribute('aria-label') === label, 'Release ' + cfg.instance);
    }
    check(reached, 'Tab reaches the seat\'s Release link');
    await page.keyboard.press('Enter');
    await page.waitForURL(/\/release\?instance_id=/);
    check((await text(page, '#release-title')) === `Release the seat ${cfg.instance}?`, 'Enter on Release asks for confirmation first');
    check(await seats.locator('tbody tr').count() === 1, 'asking to release frees no seat');
    check(await focusedText(page) === 'Release seat', 'the question\'s button has focus');
    await checkFits(page, 'the portal\'s question');
    await page.getByRole('link', { name: 'Cancel' }).click();
    await page.waitForURL(cfg.portal);
    check(await seats.locator('tbody tr').count() === 1, 'Cancel frees no seat');

    // A long product_id at 1280 px wraps inside the page.
    await page.setViewportSize({ width: 1280, height: 860 });
    await page.goto(cfg.longPortal);
    await checkFits(page, 'the portal of a long product_id');
    return {};
  },

  // One link open in two browsers: the second Release is told the seat was already
  // released (post/redirect/get: a reload posts nothing).
  async portalTwoTabs(page) {
    const other = await page.context().browser().newContext({ extraHTTPHeaders: cfg.ip ? { 'X-Forwarded-For': cfg.ip } : {} });
    await refuseOtherHosts(other);
    const second = await other.newPage();
    const ask = cfg.portal + '/release?instance_id=' + encodeURIComponent(cfg.instance);
    await page.goto(ask);
    await second.goto(ask);
    await page.getByRole('button', { name: 'Release seat' }).click();
    await page.waitForURL(/\?notice=seat-released$/);
    const [resp] = await Promise.all([second.waitForNavigation(), second.getByRole('button', { name: 'Release seat' }).click()]);
    const notice = await text(second, '.notice');
    const url = second.url();
    const reload = await second.reload();
    await other.close();
    return { status: resp.status(), url, notice, reloadMethod: reload.request().method(), reloadStatus: reload.status() };
  },

  // An expired license: no download is offered, and the page says why and whom to ask.
  async portalExpired(page) {
    const resp = await page.goto(cfg.portal);
    check(resp.status() === 200, `portal link: 200 expected, got ${resp.status()}`);
    const links = await page.getByRole('link', { name: /^Download/ }).count();
    const why = await page.locator('#downloads-unavailable').innerText().catch(() => '');
    const support = await page.locator('.portal-support').innerText().catch(() => '');
    await shot(page, 'portal-expired');
    return { links, why, support };
  },

  // The console's pages on a phone (375 px): none scrolls sideways; wide tables scroll
  // inside their card.
  async consoleNarrow(page) {
    await signInWithKey(page, cfg.key);
    await page.setViewportSize({ width: 375, height: 800 });
    const pages = ['/console/', '/console/licenses', '/console/licenses/new', '/console/licenses/' + cfg.licenseKey,
      '/console/licenses/' + cfg.licenseKey + '/seats/deactivate?instance_id=laptop', '/console/releases', '/console/leases',
      '/console/products/' + cfg.product, '/console/storefront', '/console/events', '/console/webhooks', '/console/api-keys', '/console/settings'];
    for (const p of pages) {
      const resp = await page.goto(base + p);
      check(resp.status() === 200, `${p}: 200 expected, got ${resp.status()}`);
      await checkFits(page, p);
    }
    return { checked: pages.length };
  },
};

// A Chromium that dies while it starts (a full run once saw one end with SIGSEGV before it
// opened a page, among the suite's parallel browsers on two cores) says nothing about the
// pages: it is started again, up to three times. A failure after the start is the test's.
async function launch() {
  for (let attempt = 1; ; attempt++) {
    try {
      return await chromium.launch({
        executablePath: cfg.chromium || '/usr/bin/chromium',
        args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-dev-shm-usage',
          '--disable-extensions', '--no-first-run', '--disable-sync', '--metrics-recording-only', '--mute-audio'],
      });
    } catch (err) {
      if (attempt >= 3) throw err;
      process.stderr.write(`chromium did not start (attempt ${attempt}): ${String(err).split('\n')[0]}; starting it again\n`);
    }
  }
}

const browser = await launch();
let code = 0;
let page;
try {
  const context = await browser.newContext({
    acceptDownloads: true,
    viewport: { width: 1280, height: 860 },
    // Every request carries the scenario's client address, except those Chromium makes for
    // an <a download> link: such links in the pages must stay off rate-limited routes.
    extraHTTPHeaders: cfg.ip ? { 'X-Forwarded-For': cfg.ip } : {},
  });
  context.setDefaultTimeout(20000);
  await refuseOtherHosts(context);
  page = await context.newPage();
  const run = scenarios[scenario];
  if (!run) throw new Error(`no scenario ${scenario}`);
  const out = await run(page);
  const unexpected = refused.filter((u) => !expectedAway.has(u));
  if (unexpected.length > 0) throw new Error(`the page asked for hosts outside this machine: ${unexpected.join(', ')}`);
  process.stdout.write(JSON.stringify(out) + '\n');
} catch (err) {
  process.stderr.write(`scenario ${scenario}: ${err.stack || err}\n`);
  if (page) {
    const body = await page.locator('body').innerText().catch(() => '');
    process.stderr.write(`page ${page.url()}:\n${body.slice(0, 1500)}\n`);
  }
  code = 1;
} finally {
  await browser.close();
}
process.exit(code);
