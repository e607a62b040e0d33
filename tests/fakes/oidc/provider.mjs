// A real OpenID provider for flowgate's end-to-end tests: the certified `oidc-provider` package
// (installed by scripts/test into .tools/oidc), on 127.0.0.1, issuing JWT access tokens (RFC 9068)
// for resource indicators (RFC 8707) through the client credentials grant.
//
//   node tests/fakes/oidc/provider.mjs --modules .tools/oidc/node_modules --port 0 \
//     --resource https://flowgate.test/mcp
//
// Prints `listening on http://127.0.0.1:PORT` once it serves. Clients (secret = `<id>-secret`):
//   alice, bob  -- two principals, granted the `jobs.run` scope
//   carol       -- a third principal, granted only `deploy`, not `jobs.run`
//   <each resource URI> -- a web client (authorization code) whose client id is the resource
//                  itself, so the ID tokens it gets carry `aud` = the resource: an ID token a
//                  resource server must not take for an access token (RFC 9068 section 4)
// Tokens: `POST /token` with grant_type=client_credentials, resource=<the resource>, and
// scope (e.g. `jobs.run`); `sub` is the client id, `aud` the resource, `scope` what was granted.
// ID tokens: the authorization code flow through oidc-provider's development interactions
// (`GET /auth?client_id=<resource>&response_type=code&scope=openid&nonce=...`, then the login
// form at /interaction/<uid> accepts any login, then the consent form; the code goes to
// https://flowgate.test/callback, which nobody serves: the test reads it from the redirect).
//
// Not a shortcut but worth knowing: the signing keys are generated at start (ES256 for access
// tokens, RS256 for ID tokens), so every run has fresh keys; storage is oidc-provider's in-memory
// adapter; the login and consent pages are oidc-provider's development interactions (any login
// and password sign in), since the tests need an ID token, not a user database.
import { generateKeyPairSync } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';

function arg(name, fallback) {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 && process.argv[i + 1] !== undefined ? process.argv[i + 1] : fallback;
}

const port = Number(arg('port', '0'));
const resources = arg('resource', 'https://flowgate.test/mcp').split(',');
const SCOPES = ['jobs.run', 'deploy'];

function jwk(type, options, alg, kid) {
  const { privateKey } = generateKeyPairSync(type, options);
  return { ...privateKey.export({ format: 'jwk' }), alg, use: 'sig', kid };
}

const client = (id, scope) => ({
  client_id: id,
  client_secret: `${id}-secret`,
  grant_types: ['client_credentials'],
  response_types: [],
  redirect_uris: [],
  token_endpoint_auth_method: 'client_secret_post',
  scope,
});

// The package from the folder scripts/test installed it in (ES modules ignore NODE_PATH).
async function loadProvider(modules) {
  const dir = resolve(modules, 'oidc-provider');
  const pkg = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8'));
  const entry = pkg.exports?.['.']?.import ?? pkg.exports?.['.'] ?? pkg.main;
  return import(pathToFileURL(join(dir, typeof entry === 'string' ? entry : 'lib/index.js')).href);
}

async function main() {
  const { default: Provider, errors } = await loadProvider(arg('modules', '.tools/oidc/node_modules'));
  const server = createServer();
  await new Promise((resolve) => server.listen(port, '127.0.0.1', resolve));
  const issuer = `http://127.0.0.1:${server.address().port}`;
  const provider = new Provider(issuer, {
    clients: [
      client('alice', 'jobs.run'),
      client('bob', 'jobs.run'),
      client('carol', 'deploy'),
      ...resources.map((resource) => ({
        client_id: resource,
        client_secret: `${resource}-secret`,
        grant_types: ['authorization_code'],
        response_types: ['code'],
        redirect_uris: ['https://flowgate.test/callback'],
        token_endpoint_auth_method: 'client_secret_post',
      })),
    ],
    jwks: {
      keys: [
        jwk('ec', { namedCurve: 'P-256' }, 'ES256', 'oidc-es256'),
        jwk('rsa', { modulusLength: 2048 }, 'RS256', 'oidc-rs256'),
      ],
    },
    scopes: ['openid', ...SCOPES],
    features: {
      // Any login signs in: the tests need ID tokens, not accounts.
      devInteractions: { enabled: true },
      clientCredentials: { enabled: true },
      resourceIndicators: {
        enabled: true,
        // A token request must name its resource: no default audience.
        defaultResource: () => undefined,
        useGrantedResource: () => true,
        getResourceServerInfo: (_ctx, resource) => {
          if (!resources.includes(resource)) {
            throw new errors.InvalidTarget(`unknown resource ${resource}`);
          }
          return {
            scope: SCOPES.join(' '),
            audience: resource,
            accessTokenTTL: 600,
            accessTokenFormat: 'jwt',
            jwt: { sign: { alg: 'ES256' } },
          };
        },
      },
    },
  });
  server.on('request', provider.callback());
  console.log(`listening on ${issuer}`);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
