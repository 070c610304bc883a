// The official MCP TypeScript SDK's OAuth client against kennis: metadata discovery, dynamic
// registration (or, with KENNIS_CIMD_URL, a Client ID Metadata Document URL as client_id),
// authorization URL with PKCE, code exchange and refresh. The person's part
// (login, second factor, consent) is scripted with plain HTTP; the SDK does the client's part.
// Then the SDK's MCP client uses the token: it lists the tools and calls the feature-request
// tools and ChatGPT's `search` and `fetch`, checking each structured result against the tool's
// output schema as it does.
import {
  discoverOAuthProtectedResourceMetadata,
  discoverAuthorizationServerMetadata,
  registerClient,
  startAuthorization,
  exchangeAuthorization,
  refreshAuthorization,
} from '@modelcontextprotocol/sdk/client/auth.js';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
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
const cimdUrl = process.env.KENNIS_CIMD_URL;
let clientInformation;
if (cimdUrl) {
  if (metadata.client_id_metadata_document_supported !== true) {
    throw new Error('client_id_metadata_document_supported is not advertised');
  }
  clientInformation = { client_id: cimdUrl };
} else {
  clientInformation = await registerClient(asUrl, {
    metadata,
    clientMetadata: {
      client_name: 'MCP SDK client',
      redirect_uris: [redirectUri],
      token_endpoint_auth_method: 'none',
      grant_types: ['authorization_code', 'refresh_token'],
      response_types: ['code'],
    },
  });
}
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
const client = new Client({ name: 'kennis-sdk-check', version: '1.0.0' });
await client.connect(
  new StreamableHTTPClientTransport(new URL(connector), {
    requestInit: { headers: { Authorization: `Bearer ${refreshed.access_token}` } },
  }),
);
const tools = (await client.listTools()).tools.map((t) => t.name);
const call = async (name, args) => {
  const r = await client.callTool({ name, arguments: args });
  if (r.isError) throw new Error(`${name} failed: ${JSON.stringify(r)}`);
  return r.structuredContent;
};
const apps = await call('app_list', {});
const live = apps.apps.find((a) => a.accepts_requests);
if (!live) throw new Error(`no live app: ${JSON.stringify(apps)}`);
const created = await call('feature_request_create', {
  app_id: live.app_id,
  title: 'Exportknop',
  description: 'Graag een knop om de planning te exporteren.',
});
const replied = await call('feature_request_reply', { id: created.id, message: 'Liefst als CSV.' });
const read = await call('feature_request_read', { id: created.id });
const list = await call('feature_request_list', { mine: true });
const closed = await client.callTool({
  name: 'feature_request_create',
  arguments: { app_id: apps.apps.find((a) => !a.accepts_requests).app_id, title: 't', description: 'd' },
});
const missing = await client.callTool({ name: 'kennisbank_read', arguments: { path: 'nergens.md' } });
// ChatGPT's two tools, through the SDK (which checks each result against its output schema).
const listed = (await client.listTools()).tools;
const chatgpt = listed.filter((t) => t.name === 'search' || t.name === 'fetch').map((t) => ({ name: t.name, title: t.title, annotations: t.annotations }));
const searched = await call('search', { query: 'kozijn onderhoud' });
const fetched = searched.results.length ? await call('fetch', { id: searched.results[0].id }) : null;
const unknown = await client.callTool({ name: 'fetch', arguments: { id: 'nergens/niets.md' } });
await client.close();

// The SDK's client with other tokens (given by the test): one whose scopes lack `kennisbank`
// (no `search` or `fetch`, and calling them is refused), and a personal access token.
async function withToken(token, work) {
  const c = new Client({ name: 'kennis-sdk-check', version: '1.0.0' });
  await c.connect(
    new StreamableHTTPClientTransport(new URL(connector), {
      requestInit: { headers: { Authorization: `Bearer ${token}` } },
    }),
  );
  try {
    return await work(c);
  } finally {
    await c.close();
  }
}
let narrow = null;
if (process.env.KENNIS_NARROW_TOKEN) {
  narrow = await withToken(process.env.KENNIS_NARROW_TOKEN, async (c) => {
    const names = (await c.listTools()).tools.map((t) => t.name);
    let refused = null;
    try {
      await c.callTool({ name: 'search', arguments: { query: 'kozijn' } });
    } catch (e) {
      refused = String(e.message);
    }
    return { tools: names, search: refused };
  });
}
let pat = null;
if (process.env.KENNIS_PAT) {
  pat = await withToken(process.env.KENNIS_PAT, async (c) => {
    const names = (await c.listTools()).tools.map((t) => t.name);
    const r = await c.callTool({ name: 'search', arguments: { query: 'kozijn onderhoud' } });
    return { tools: names, searched: r.structuredContent };
  });
}
console.log(
  JSON.stringify({ client_id: clientInformation.client_id, tokens, refreshed, tools, created, replied, read, list, closed, missing, chatgpt, searched, fetched, unknown, narrow, pat }),
);
