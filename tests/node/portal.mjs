// The portal's tasks in real headless Chromium (issue 14): invite → accept → enrol → portal;
// change a role; reset a password; remove a member (their connector token then gets 401);
// search and open a document; upload two files at once; run a trigger's run again; file a
// feature request and answer an agent's question; log in in Dutch and in English (`<html lang>`). axe-core checks every page visited, in both languages
// (no serious or critical violation). Screenshots of the main pages go to docs/screenshots/
// when KENNIS_SCREENSHOTS names that directory. Prints one JSON line for the Rust test.
import { readFileSync, mkdirSync } from 'node:fs';
import { createRequire } from 'node:module';
import crypto from 'node:crypto';
import path from 'node:path';
import { chromium } from 'playwright-core';
import { env, deadline } from './common.mjs';

deadline(240_000);
const base = env('KENNIS_URL');
const admin = { email: env('KENNIS_EMAIL'), password: env('KENNIS_PASSWORD'), secret: env('KENNIS_TOTP_SECRET') };
const org = env('KENNIS_ORG');
const now = Number(env('KENNIS_NOW')); // the server's (manual) clock, unix seconds
const memberToken = env('KENNIS_MEMBER_TOKEN'); // a connector token of mo@example.org
const runId = env('KENNIS_RUN_ID'); // a finished run of a trigger without cooldown
const requestId = env('KENNIS_REQUEST_ID'); // a feature request with an open question
const shots = process.env.KENNIS_SCREENSHOTS || '';
const axeSource = readFileSync(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8');

// --- TOTP (RFC 6238, SHA-1, 6 digits, 30 s) at the server's clock -------------------------------
function base32(s) {
  const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZ234567';
  let bits = '';
  for (const c of s.replace(/=+$/, '').toUpperCase()) {
    const v = alphabet.indexOf(c);
    if (v < 0) throw new Error(`not base32: ${c}`);
    bits += v.toString(2).padStart(5, '0');
  }
  const out = [];
  for (let i = 0; i + 8 <= bits.length; i += 8) out.push(parseInt(bits.slice(i, i + 8), 2));
  return Buffer.from(out);
}
function totp(secret, step) {
  const msg = Buffer.alloc(8);
  msg.writeBigUInt64BE(BigInt(step));
  const h = crypto.createHmac('sha1', base32(secret)).update(msg).digest();
  const o = h[h.length - 1] & 0xf;
  const n = (h.readUInt32BE(o) & 0x7fffffff) % 1_000_000;
  return String(n).padStart(6, '0');
}
// The server accepts the step before and after its own; each code once, in rising order.
const steps = new Map();
function nextCode(email, secret) {
  const step = steps.get(email) ?? Math.floor(now / 30) - 1;
  if (step > Math.floor(now / 30) + 1) throw new Error(`no TOTP step left for ${email}`);
  steps.set(email, step + 1);
  return totp(secret, step);
}
// ------------------------------------------------------------------------------------------------

const report = { axe: {}, tasks: [] };
const axeFailures = [];
function check(cond, what) {
  if (!cond) throw new Error(`check failed: ${what}`);
}

async function axe(page, name) {
  await page.evaluate(axeSource);
  const r = await page.evaluate(() =>
    // eslint-disable-next-line no-undef
    axe.run(document, { resultTypes: ['violations'] }),
  );
  const bad = r.violations.filter((v) => v.impact === 'serious' || v.impact === 'critical');
  const lang = await page.getAttribute('html', 'lang');
  report.axe[`${lang} ${name}`] = bad.length;
  // Collected, so one run names every page's violations; the script fails at its end.
  for (const v of bad) {
    axeFailures.push(`${name} [${lang}] ${new URL(page.url()).pathname}: ${v.id} (${v.impact}): ${v.help} — ${v.nodes.map((n) => n.target.join(' ')).slice(0, 3).join(', ')}`);
  }
}

async function shot(page, name) {
  if (!shots) return;
  mkdirSync(shots, { recursive: true });
  await page.screenshot({ path: path.join(shots, `${name}.png`), fullPage: false });
}

/** Visits `url`, checks it with axe, optionally takes a screenshot. */
async function visit(page, url, name, screenshot) {
  const resp = await page.goto(url);
  check(resp && resp.status() < 400, `${name}: ${url} answered ${resp && resp.status()}`);
  await axe(page, name);
  if (screenshot) await shot(page, screenshot);
}

/** At 1280 px the navigation fits on one line, and a focused field shows its focus. */
async function layoutChecks(page, lang) {
  const nav = await page.$eval('.nav ul', (ul) => {
    const items = [...ul.querySelectorAll('li')].map((li) => li.getBoundingClientRect().top);
    return { fits: ul.scrollWidth <= ul.parentElement.clientWidth, oneLine: new Set(items).size === 1 };
  });
  check(nav.fits && nav.oneLine, `the navigation fits on one line at 1280 px in ${lang}: ${JSON.stringify(nav)}`);
  await page.focus('#invite-form input[name=email]');
  const outline = await page.$eval('#invite-form input[name=email]', (e) => getComputedStyle(e).outlineStyle);
  check(outline !== 'none', `a focused field shows its focus (${outline})`);
}

async function submit(page, selector) {
  await Promise.all([page.waitForNavigation(), page.click(selector)]);
}

async function login(page, who, lang, { checkAxe = true } = {}) {
  const resp = await page.goto(`${base}/login`);
  check(resp.status() === 200, 'login page');
  check((await page.getAttribute('html', 'lang')) === lang, `login page in ${lang}`);
  if (checkAxe) await axe(page, 'login');
  await page.fill('#login-form input[name=email]', who.email);
  await page.fill('#login-form input[name=password]', who.password);
  await submit(page, '#login-form button[type=submit]');
  await page.waitForSelector('#totp-form');
  if (checkAxe) await axe(page, 'second factor');
  await page.fill('#totp-form input[name=code]', nextCode(who.email, who.secret));
  await submit(page, '#totp-form button[type=submit]');
  check(new URL(page.url()).pathname.startsWith('/portal'), `${who.email} landed in the portal: ${page.url()}`);
}

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  args: [
    '--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync',
    '--font-render-hinting=none',
  ],
});
const viewport = { width: 1280, height: 800 };
async function context(locale) {
  return browser.newContext({ locale, viewport, extraHTTPHeaders: { 'Accept-Language': locale === 'nl-NL' ? 'nl-NL,nl;q=0.9' : 'en-GB,en;q=0.8' } });
}

try {
  // ---- English admin: the main tasks ----------------------------------------------------------
  const en = await context('en-GB');
  const page = await en.newPage();
  await page.goto(`${base}/login`);
  await shot(page, 'login');
  await login(page, admin, 'en');
  await visit(page, `${base}/portal`, 'home');
  await visit(page, `${base}/portal/account`, 'account', 'account');

  // Members: invite someone; the one-time link.
  const o = `${base}/portal/o/${org}`;
  await visit(page, `${o}/members`, 'members');
  await layoutChecks(page, 'en');
  await page.fill('#invite-form input[name=email]', 'nieuw@example.org');
  await page.selectOption('#invite-form select[name=role]', 'member');
  await submit(page, '#invite-form button[type=submit]');
  const inviteUrl = (await page.textContent('#invite-link')).trim();
  check(inviteUrl.startsWith(`${base}/invite/`), `invite link: ${inviteUrl}`);
  await axe(page, 'members with invitation link');
  report.tasks.push('invite');

  // Accept it in a fresh browser: name and password, enrol the second factor, terms, portal.
  const newcomer = { email: 'nieuw@example.org', password: 'zonnebloem-kaasschaaf-7' };
  {
    const ctx = await context('en-GB');
    const p = await ctx.newPage();
    await visit(p, inviteUrl, 'invitation', 'invitation');
    await p.fill('#invite-accept-form input[name=name]', 'Nina Nieuw');
    const pw = await p.$$('#invite-accept-form input[type=password]');
    check(pw.length === 2, 'two password fields');
    for (const f of pw) await f.fill(newcomer.password);
    await submit(p, '#invite-accept-form button[type=submit]');
    await p.waitForSelector('#totp-secret');
    await axe(p, 'enrolment');
    await shot(p, 'enrolment');
    newcomer.secret = (await p.textContent('#totp-secret')).trim().replace(/^.*secret=([A-Z2-7]+).*$/, '$1');
    await p.fill('#totp-form input[name=code]', nextCode(newcomer.email, newcomer.secret));
    await submit(p, '#totp-form button[type=submit]');
    await p.waitForSelector('#terms-form');
    await axe(p, 'terms');
    await submit(p, '#terms-form button[name=accept]');
    check(new URL(p.url()).pathname.startsWith('/portal'), `newcomer in the portal: ${p.url()}`);
    check((await p.textContent('body')).includes(org) || (await p.content()).includes(`/portal/o/${org}/`), 'the organisation is listed');
    await ctx.close();
    report.tasks.push('accept-enrol-portal');
  }

  // Change a role: the newcomer becomes admin.
  await visit(page, `${o}/members`, 'members', 'members');
  const row = (email) => `#members-table tr[data-email="${email}"]`;
  await page.selectOption(`${row(newcomer.email)} select[name=role]`, 'admin');
  await submit(page, `${row(newcomer.email)} button[name=action][value=save]`);
  check((await page.$eval(`${row(newcomer.email)} select[name=role]`, (s) => s.value)) === 'admin', 'role changed');
  report.tasks.push('change-role');

  // Reset a password: the link, a new password and a new second factor.
  await submit(page, `${row(newcomer.email)} button[name=action][value=reset]`);
  const resetUrl = (await page.textContent('#reset-link')).trim();
  check(resetUrl.startsWith(`${base}/reset/`), `reset link: ${resetUrl}`);
  {
    const ctx = await context('en-GB');
    const p = await ctx.newPage();
    await visit(p, resetUrl, 'password reset');
    for (const f of await p.$$('#reset-form input[type=password]')) await f.fill('regenton-fietsbel-42');
    await submit(p, '#reset-form button[type=submit]');
    await p.waitForSelector('#totp-secret');
    const secret = (await p.textContent('#totp-secret')).trim().replace(/^.*secret=([A-Z2-7]+).*$/, '$1');
    check(secret !== newcomer.secret, 'a new second factor after the reset');
    await p.fill('#totp-form input[name=code]', nextCode(newcomer.email, secret));
    await submit(p, '#totp-form button[type=submit]');
    check(new URL(p.url()).pathname.startsWith('/portal'), `after the reset in the portal: ${p.url()}`);
    await ctx.close();
    report.tasks.push('reset-password');
  }

  // Remove a member: their connector token is refused at once.
  const mcp = () => fetch(`${base}/mcp/kennisbank`, {
    method: 'POST',
    headers: {
      authorization: `Bearer ${memberToken}`,
      'content-type': 'application/json',
      accept: 'application/json, text/event-stream',
      'mcp-protocol-version': '2025-06-18',
    },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list', params: {} }),
  });
  check((await mcp()).status === 200, 'the member token works before the removal');
  await visit(page, `${o}/members`, 'members');
  await submit(page, `${row('mo@example.org')} button[name=action][value=remove]`);
  await axe(page, 'remove confirmation');
  await submit(page, '#remove-confirm-form button[name=action][value=remove]');
  check(!(await page.$(row('mo@example.org'))), 'mo is no longer listed');
  const after = await mcp();
  check(after.status === 401, `the removed member's token: ${after.status}`);
  report.tasks.push('remove-member-401');

  // Knowledge base: browse, search, open a document.
  await visit(page, `${o}/kb`, 'knowledge base', 'kb');
  await page.fill('#kb-search-form input[name=q]', 'dakgoot');
  await submit(page, '#kb-search-form button[type=submit]');
  await page.waitForSelector('#kb-results');
  await axe(page, 'search results');
  await shot(page, 'kb-search');
  await submit(page, '#kb-results a');
  await page.waitForSelector('#kb-document');
  check((await page.textContent('#kb-document')).includes('dakgoot'), 'the document shows its text');
  await axe(page, 'document');
  await shot(page, 'kb-document');
  report.tasks.push('search-open');

  // Upload two files at once.
  await visit(page, `${o}/kb`, 'knowledge base');
  await page.setInputFiles('#upload-form input[type=file]', [
    { name: 'eerste.md', mimeType: 'text/markdown', buffer: Buffer.from('# Eerste\n\nEen.\n') },
    { name: 'tweede.txt', mimeType: 'text/plain', buffer: Buffer.from('Twee.\n') },
  ]);
  await submit(page, '#upload-form button[type=submit]');
  const listing = await page.content();
  check(listing.includes('eerste.md') && listing.includes('tweede.txt'), 'both uploads listed');
  await visit(page, `${o}/kb`, 'knowledge base');
  const names = await page.$$eval('#kb-entries a', (as) => as.map((a) => a.textContent));
  check(names.some((n) => n.includes('eerste.md')) && names.some((n) => n.includes('tweede.txt')), `both files stored: ${names}`);
  report.tasks.push('upload-two');

  // A trigger's run: its page, then run again.
  await visit(page, `${o}/runs/${runId}`, 'run', 'run');
  const instructions = await page.textContent('#run-instructions');
  await submit(page, '#run-again-form button[type=submit]');
  const again = new URL(page.url()).pathname;
  check(again.startsWith(`/portal/o/${org}/runs/`) && !again.endsWith(`/runs/${runId}`), `a new run: ${again}`);
  check((await page.textContent('#run-instructions')) === instructions, 'same instructions');
  await axe(page, 'run (again)');
  report.runAgain = again.split('/').pop();
  report.tasks.push('run-again');

  // Feature requests: file one; answer an agent's open question on another.
  await visit(page, `${o}/requests`, 'feature requests', 'requests');
  await page.fill('#request-form input[name=title]', 'Urenoverzicht per project');
  await page.fill('#request-form textarea[name=description]', 'Een overzicht van de uren per project en per week.');
  await submit(page, '#request-form button[type=submit]');
  check(/\/requests\/\d+$/.test(new URL(page.url()).pathname), `the new request's page: ${page.url()}`);
  check((await page.textContent('h1')).includes('Urenoverzicht per project'), 'the new request is shown');
  await axe(page, 'new feature request');
  report.tasks.push('file-request');
  await visit(page, `${o}/requests/${requestId}`, 'feature request', 'request');
  await page.check('.answer-form input[name=option_ids][value=puntkomma]');
  await submit(page, '.answer-form button[type=submit]');
  check(!(await page.$('.answer-form')), 'no open question after answering');
  check((await page.textContent('#conversation')).includes('Puntkomma'), 'the answer is in the conversation');
  await axe(page, 'feature request (answered)');
  report.tasks.push('answer-question');

  // The other portal pages, checked by axe; screenshots of the main ones.
  await visit(page, `${o}/triggers`, 'triggers', 'triggers');
  const trig = await page.$('#triggers a[href*="/triggers/"]');
  if (trig) await visit(page, new URL(await trig.getAttribute('href'), base).toString(), 'trigger');
  await visit(page, `${o}/connections`, 'connections', 'connections');
  await visit(page, `${o}/apps`, 'apps');
  await visit(page, `${o}/audit`, 'audit', 'audit');
  // Phone width: the same pages stay usable.
  await page.setViewportSize({ width: 390, height: 844 });
  await visit(page, `${o}/members`, 'members (phone)', 'phone-members');
  await visit(page, `${o}/kb`, 'knowledge base (phone)', 'phone-kb');
  await visit(page, `${o}/requests/${requestId}`, 'feature request (phone)', 'phone-request');
  await en.close();

  // ---- Dutch: the login in Dutch, the pages in Dutch -----------------------------------------
  const nl = await context('nl-NL');
  const np = await nl.newPage();
  await np.goto(`${base}/login`);
  check((await np.textContent('#login-form button[type=submit]')).includes('Inloggen'), 'Dutch login button');
  await shot(np, 'login-nl');
  await login(np, admin, 'nl');
  for (const [p, name] of [
    ['/portal', 'home'], ['/portal/account', 'account'], [`/portal/o/${org}/members`, 'members'],
    [`/portal/o/${org}/kb`, 'knowledge base'], [`/portal/o/${org}/runs/${runId}`, 'run'],
    [`/portal/o/${org}/triggers`, 'triggers'], [`/portal/o/${org}/connections`, 'connections'],
    [`/portal/o/${org}/requests`, 'feature requests'], [`/portal/o/${org}/requests/${requestId}`, 'feature request'],
    [`/portal/o/${org}/apps`, 'apps'], [`/portal/o/${org}/audit`, 'audit'],
    [`/portal/o/${org}/kb/handboek/dakgoot.md`, 'document'],
  ]) {
    const dutchShots = { members: 'members-nl', 'feature requests': 'requests-nl', 'feature request': 'request-nl' };
    await visit(np, `${base}${p}`, name, dutchShots[name] || '');
    check((await np.getAttribute('html', 'lang')) === 'nl', `${name} in Dutch`);
  }
  {
    const np2 = await nl.newPage();
    await np2.goto(`${base}/portal/o/${org}/members`);
    await layoutChecks(np2, 'nl');
  }
  await nl.close();
  report.tasks.push('dutch-and-english');

  // Without JavaScript: log in and upload a file, as every task works without scripts.
  const nojs = await browser.newContext({ viewport, javaScriptEnabled: false });
  const jp = await nojs.newPage();
  await login(jp, admin, 'en', { checkAxe: false });
  await jp.goto(`${o}/kb`);
  await jp.setInputFiles('#upload-form input[type=file]', [
    { name: 'zonder-script.txt', mimeType: 'text/plain', buffer: Buffer.from('Geen script nodig.\n') },
  ]);
  await submit(jp, '#upload-form button[type=submit]');
  check((await jp.content()).includes('zonder-script.txt'), 'uploaded without JavaScript');
  await nojs.close();
  report.tasks.push('no-javascript');
  if (axeFailures.length) throw new Error(`axe found serious or critical violations:\n  ${axeFailures.join('\n  ')}`);
  console.log(JSON.stringify(report));
} catch (e) {
  // Say where it broke: every open page's address and text.
  for (const ctx of browser.contexts()) {
    for (const p of ctx.pages()) {
      const text = await p.textContent('body').catch(() => '');
      console.error(`--- ${p.url()}\n${(text || '').replace(/\s+/g, ' ').slice(0, 1500)}`);
    }
  }
  throw e;
} finally {
  await browser.close();
}
