// A real OpenID provider for kennis's sign-in tests (tests/it/oidc.rs): the npm package
// `oidc-provider` (a certified OpenID Provider), on 127.0.0.1, with one confidential client
// whose redirect URI the test gives. It prints one JSON line `{"issuer": …}` when it listens.
//
// Settings (environment):
//   OIDC_PORT           port to listen on (127.0.0.1)
//   OIDC_REDIRECT_URI   the client's one redirect URI (kennis's /login/oidc/<id>/callback)
//   OIDC_CLIENT_ID, OIDC_CLIENT_SECRET
//   OIDC_ACCOUNTS       JSON {accountId: {email, email_verified, name}}
//   OIDC_CLAIMS_IN_ID_TOKEN=1  put email and profile claims in the ID token too; otherwise, as
//                       OpenID Connect Core 5.4 says for the code flow, only userinfo has them
//   OIDC_ID_TOKEN_TTL   seconds an ID token is valid (default 3600)
//   OIDC_JWKS           what /jwks serves: `own` (default, the signing key), `other` (another
//                       key under the same key id: every ID token fails its signature check),
//                       `stale-first` (the first fetch a decoy key only, later ones the real key:
//                       a key rotation kennis must follow by fetching again)
//
// The login is driven without a person: the interaction page signs in the account the
// authorization request names in `login_hint` (the test adds it to the URL kennis redirects
// to), or answers `access_denied` for an unknown one. Consent is given by loadExistingGrant.

import http from 'node:http';
import crypto from 'node:crypto';
import Provider from 'oidc-provider';

const env = (name, fallback) => {
  const v = process.env[name];
  if (v === undefined || v === '') {
    if (fallback === undefined) throw new Error(`${name} is not set`);
    return fallback;
  }
  return v;
};

const port = Number(env('OIDC_PORT'));
const issuer = `http://127.0.0.1:${port}`;
const accounts = JSON.parse(env('OIDC_ACCOUNTS'));
const jwksMode = env('OIDC_JWKS', 'own');

function signingKey(kid) {
  const { privateKey } = crypto.generateKeyPairSync('rsa', { modulusLength: 2048 });
  return { ...privateKey.export({ format: 'jwk' }), kid, alg: 'RS256', use: 'sig' };
}
const publicPart = ({ kty, n, e, kid, alg, use }) => ({ kty, n, e, kid, alg, use });

const own = signingKey('k1');
const other = publicPart(signingKey('k1'));
const decoy = publicPart(signingKey('decoy'));
let jwksFetches = 0;

const provider = new Provider(issuer, {
  clients: [
    {
      client_id: env('OIDC_CLIENT_ID'),
      client_secret: env('OIDC_CLIENT_SECRET'),
      redirect_uris: [env('OIDC_REDIRECT_URI')],
      response_types: ['code'],
      grant_types: ['authorization_code'],
      token_endpoint_auth_method: 'client_secret_basic',
    },
  ],
  jwks: { keys: [own] },
  cookies: { keys: [crypto.randomBytes(32).toString('hex')] },
  claims: {
    openid: ['sub'],
    email: ['email', 'email_verified'],
    profile: ['name'],
  },
  conformIdTokenClaims: process.env.OIDC_CLAIMS_IN_ID_TOKEN !== '1',
  // kennis always sends PKCE; the provider insists, so a sign-in without it would fail.
  pkce: { required: () => true },
  ttl: { IdToken: Number(env('OIDC_ID_TOKEN_TTL', '3600')) },
  features: { devInteractions: { enabled: false } },
  interactions: { url: (ctx, interaction) => `/interaction/${interaction.uid}` },
  async findAccount(ctx, id) {
    const a = accounts[id];
    if (!a) return undefined;
    return {
      accountId: id,
      async claims() {
        return { sub: id, ...a };
      },
    };
  },
  // Consent is implied: every scope the client asks for is granted.
  async loadExistingGrant(ctx) {
    const grant = new ctx.oidc.provider.Grant({
      clientId: ctx.oidc.client.clientId,
      accountId: ctx.oidc.session.accountId,
    });
    grant.addOIDCScope(ctx.oidc.requestParamScopes ? [...ctx.oidc.requestParamScopes].join(' ') : 'openid');
    await grant.save();
    return grant;
  },
});

const callback = provider.callback();

async function interaction(req, res) {
  const details = await provider.interactionDetails(req, res);
  const account = details.params.login_hint;
  const result = accounts[account]
    ? { login: { accountId: account } }
    : { error: 'access_denied', error_description: 'no such account at the test provider' };
  await provider.interactionFinished(req, res, result, { mergeWithLastSubmission: false });
}

function serveJwks(res) {
  jwksFetches += 1;
  let keys;
  if (jwksMode === 'other') keys = [other];
  else if (jwksMode === 'stale-first' && jwksFetches === 1) keys = [decoy];
  else keys = [publicPart(own)];
  res.writeHead(200, { 'content-type': 'application/json' });
  res.end(JSON.stringify({ keys }));
}

http
  .createServer((req, res) => {
    const path = new URL(req.url, issuer).pathname;
    if (path.startsWith('/interaction/')) {
      interaction(req, res).catch((e) => {
        res.writeHead(500);
        res.end(String(e));
      });
    } else if (path === '/jwks' && jwksMode !== 'own') {
      serveJwks(res);
    } else if (path === '/__test/jwks-fetches') {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ fetches: jwksFetches }));
    } else {
      if (path === '/jwks') jwksFetches += 1;
      callback(req, res);
    }
  })
  .listen(port, '127.0.0.1', () => {
    console.log(JSON.stringify({ issuer }));
  });
