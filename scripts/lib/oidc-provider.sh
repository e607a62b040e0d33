# Sourced by scripts/test and scripts/clients: a real OpenID provider (the certified
# oidc-provider package, tests/fakes/oidc/provider.mjs) on a free loopback port, issuing JWT
# access tokens for flowgate's test resources through the client credentials grant.
#
#   start_oidc_provider     sets FLOWGATE_TEST_OIDC_URL (exported) and $oidc_pid
#
# Installs Node 22 and the pinned package into .tools/oidc (git-ignored) on first use. The caller
# stops $oidc_pid. Its output goes to target/oidc.out and target/oidc.log.

oidc_provider_version=9.13.3

start_oidc_provider() {
  local tools=$PWD/.tools/oidc
  if [ ! -x "$tools/node_modules/.bin/node" ] \
      || ! grep -q "\"version\": \"$oidc_provider_version\"" "$tools/node_modules/oidc-provider/package.json" 2>/dev/null; then
    echo "== installing Node 22 and oidc-provider@$oidc_provider_version into $tools"
    mkdir -p "$tools"
    [ -f "$tools/package.json" ] || echo '{"private": true}' > "$tools/package.json"
    ( cd "$tools" && npm install --no-audit --no-fund --loglevel=error "node@22" "oidc-provider@$oidc_provider_version" )
  fi
  mkdir -p target
  rm -f target/oidc.out
  "$tools/node_modules/.bin/node" tests/fakes/oidc/provider.mjs --modules "$tools/node_modules" \
    --port 0 --resource https://flowgate.test/mcp,https://other.flowgate.test/mcp \
    >target/oidc.out 2>target/oidc.log &
  oidc_pid=$!
  for _ in $(seq 100); do grep -q '^listening on ' target/oidc.out 2>/dev/null && break; sleep 0.1; done
  FLOWGATE_TEST_OIDC_URL=$(sed -n 's/^listening on //p' target/oidc.out)
  export FLOWGATE_TEST_OIDC_URL
  [ -n "$FLOWGATE_TEST_OIDC_URL" ] || { echo "the OpenID provider did not start: see target/oidc.log"; return 1; }
  echo "== OpenID provider on $FLOWGATE_TEST_OIDC_URL"
}

# An access token for flowgate's test resource, for client $1 (secret: "$1-secret"), scope $2.
oidc_token() {
  python3 - "$FLOWGATE_TEST_OIDC_URL" "$1" "${2:-}" <<'PY'
import json, sys, urllib.parse, urllib.request
issuer, client, scope = sys.argv[1:4]
meta = json.load(urllib.request.urlopen(issuer + "/.well-known/oauth-authorization-server", timeout=10))
form = {"grant_type": "client_credentials", "client_id": client, "client_secret": client + "-secret",
        "resource": "https://flowgate.test/mcp"}
if scope:
    form["scope"] = scope
req = urllib.request.Request(meta["token_endpoint"], data=urllib.parse.urlencode(form).encode())
print(json.load(urllib.request.urlopen(req, timeout=10))["access_token"])
PY
}
