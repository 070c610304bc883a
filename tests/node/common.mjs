// Shared helpers for the outside checks: a loopback callback server and a PKCE pair.
import http from 'node:http';
import crypto from 'node:crypto';

/** Starts a loopback server on a free port; `code` resolves with the callback's query. */
export async function callbackServer() {
  let resolve;
  const code = new Promise((r) => (resolve = r));
  const server = http.createServer((req, res) => {
    const url = new URL(req.url, 'http://127.0.0.1');
    if (url.pathname !== '/callback') {
      res.writeHead(404).end();
      return;
    }
    res.writeHead(200, { 'content-type': 'text/plain' }).end('You can close this window.');
    resolve(Object.fromEntries(url.searchParams));
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address();
  return { redirectUri: `http://127.0.0.1:${port}/callback`, code, close: () => server.close() };
}

export function pkce() {
  const verifier = crypto.randomBytes(32).toString('base64url');
  const challenge = crypto.createHash('sha256').update(verifier).digest('base64url');
  return { verifier, challenge };
}

export function env(name) {
  const v = process.env[name];
  if (!v) throw new Error(`environment variable ${name} is required`);
  return v;
}

/** Fails the script if it runs longer than `ms`. */
export function deadline(ms) {
  setTimeout(() => {
    console.error(`timed out after ${ms} ms`);
    process.exit(3);
  }, ms).unref();
}
