// Real headless Chromium through login, second factor and consent; prints the loopback
// callback's parameters as JSON for the Rust test to exchange.
import { chromium } from 'playwright-core';
import { callbackServer, pkce, env, deadline } from './common.mjs';

deadline(90_000);
const base = env('KENNIS_URL');
const email = env('KENNIS_EMAIL');
const password = env('KENNIS_PASSWORD');
const totp = env('KENNIS_TOTP_CODE');
const org = env('KENNIS_ORG');

const cb = await callbackServer();
const reg = await fetch(`${base}/register`, {
  method: 'POST',
  headers: { 'content-type': 'application/json' },
  body: JSON.stringify({
    client_name: 'Browser test',
    redirect_uris: [cb.redirectUri],
    token_endpoint_auth_method: 'none',
  }),
});
if (reg.status !== 201) throw new Error(`register: ${reg.status} ${await reg.text()}`);
const client = await reg.json();
const { verifier, challenge } = pkce();
const auth = new URL(`${base}/authorize`);
auth.search = new URLSearchParams({
  response_type: 'code',
  client_id: client.client_id,
  redirect_uri: cb.redirectUri,
  state: 'browser-state',
  code_challenge: challenge,
  code_challenge_method: 'S256',
  scope: 'kennisbank feature_requests',
}).toString();

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  args: [
    '--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync',
  ],
});
try {
  const page = await browser.newPage();
  await page.goto(auth.toString());
  await page.fill('#login-form input[name=email]', email);
  await page.fill('#login-form input[name=password]', password);
  await Promise.all([page.waitForSelector('#totp-form'), page.click('#login-form button[type=submit]')]);
  await page.fill('#totp-form input[name=code]', totp);
  await Promise.all([page.waitForSelector('#consent-form'), page.click('#totp-form button[type=submit]')]);
  await page.check(`#consent-form input[name=org][value="${org}"]`);
  const checked = await page.$$eval('#consent-form input[name=scope]', (els) => els.map((e) => e.checked));
  if (checked.length !== 2 || !checked.every(Boolean)) throw new Error(`scopes not all checked: ${checked}`);
  await page.click('#consent-form button[name=decision][value=approve]');
  const params = await cb.code;
  console.log(JSON.stringify({ ...params, code_verifier: verifier, client_id: client.client_id, redirect_uri: cb.redirectUri }));
} finally {
  await browser.close();
  cb.close();
}
