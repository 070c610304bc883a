// The official MCP TypeScript SDK's OAuth client against kennis: metadata discovery, dynamic
// registration, authorization URL with PKCE, code exchange and refresh. The person's part
// (login, second factor, consent) is scripted with plain HTTP; the SDK does the client's part.
import {
  discoverOAuthProtectedResourceMetadata,
  discoverAuthorizationServerMetadata,
  registerClient,
  startAuthorization,
  exchangeAuthorization,
  refreshAuthorization,
} from '@modelcontextprotocol/sdk/client/auth.js';
import { env, deadline } from './common.mjs';

deadline(60_000);
const base = env('KENNIS_URL');
const connector = `${base}/mcp/kennisbank`;
const redirectUri = 'http://127.0.0.1:43210/callback';

const resource = await discoverOAuthProtectedResourceMetadata(connector);
if (resource.resource !== connector) throw new Error(`resource ${resource.resource}`);
const asUrl = resource.authorization_servers[0];
const metadata = await discoverAuthorizationServerMetadata(asUrl);
if (!metadata) throw new Error('no authorization server metadata');
const clientInformation = await registerClient(asUrl, {
  metadata,
  clientMetadata: {
    client_name: 'MCP SDK client',
    redirect_uris: [redirectUri],
    token_endpoint_auth_method: 'none',
    grant_types: ['authorization_code', 'refresh_token'],
    response_types: ['code'],
  },
});
const { authorizationUrl, codeVerifier } = await startAuthorization(asUrl, {
  metadata,
  clientInformation,
  redirectUrl: redirectUri,
  scope: 'kennisbank feature_requests',
  state: 'sdk-state',
  resource: new URL(connector),
});

// The person, scripted: cookies by hand, CSRF tokens from the forms.
const jar = new Map();
async function go(url, form) {
  const headers = { cookie: [...jar].map(([k, v]) => `${k}=${v}`).join('; ') };
  const init = { redirect: 'manual', headers };
  if (form) {
    init.method = 'POST';
    headers['content-type'] = 'application/x-www-form-urlencoded';
    init.body = new URLSearchParams(form).toString();
  }
  const res = await fetch(new URL(url, base), init);
  for (const c of res.headers.getSetCookie()) {
    const [pair] = c.split(';');
    const i = pair.indexOf('=');
    jar.set(pair.slice(0, i), pair.slice(i + 1));
  }
  return { status: res.status, location: res.headers.get('location'), body: await res.text() };
}
const unescape = (s) => s.replaceAll('&quot;', '"').replaceAll('&lt;', '<').replaceAll('&gt;', '>').replaceAll('&amp;', '&');
function hidden(body) {
  return [...body.matchAll(/<input type="hidden" name="([^"]+)" value="([^"]*)"/g)].map((m) => [m[1], unescape(m[2])]);
}
function csrf(body) {
  return hidden(body).find(([k]) => k === 'csrf_token')[1];
}
function expect(cond, what, r) {
  if (!cond) throw new Error(`${what}: ${r.status} ${r.location ?? ''} ${r.body.slice(0, 500)}`);
}

let r = await go(authorizationUrl.toString());
expect(r.status === 303 && r.location.startsWith('/login'), 'authorize → login', r);
const loginUrl = r.location;
r = await go(loginUrl);
r = await go(loginUrl, { csrf_token: csrf(r.body), email: env('KENNIS_EMAIL'), password: env('KENNIS_PASSWORD') });
expect(r.status === 303, 'login', r);
const totpUrl = r.location;
r = await go(totpUrl);
r = await go(totpUrl, { csrf_token: csrf(r.body), code: env('KENNIS_TOTP_CODE') });
expect(r.status === 303, 'second factor', r);
r = await go(r.location);
expect(r.status === 200 && r.body.includes('id="consent-form"'), 'consent page', r);
const form = new URLSearchParams(hidden(r.body));
form.append('org', env('KENNIS_ORG'));
form.append('scope', 'kennisbank');
form.append('scope', 'feature_requests');
form.append('decision', 'approve');
r = await go('/authorize', form);
expect(r.status === 302 && r.location.startsWith(redirectUri), 'approve', r);
const back = new URL(r.location).searchParams;
if (back.get('state') !== 'sdk-state') throw new Error('state lost');
if (back.get('iss') !== metadata.issuer) throw new Error(`iss ${back.get('iss')}`);

const tokens = await exchangeAuthorization(asUrl, {
  metadata,
  clientInformation,
  authorizationCode: back.get('code'),
  codeVerifier,
  redirectUri,
  resource: new URL(connector),
});
const refreshed = await refreshAuthorization(asUrl, {
  metadata,
  clientInformation,
  refreshToken: tokens.refresh_token,
  resource: new URL(connector),
});
console.log(JSON.stringify({ client_id: clientInformation.client_id, tokens, refreshed }));
