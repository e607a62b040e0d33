# Sourced by scripts/test: gitlab-ci-local, the runner the GitLab API fake
# (tests/fakes/gitlab/fake_gitlab.py) runs each pipeline job with.
#
#   install_gitlab_ci_local   sets FLOWGATE_TEST_GITLAB_CI_LOCAL (exported): the command, as
#                             "NODE SCRIPT", that runs gitlab-ci-local
#
# Installs Node 22 and the pinned package into .tools/gitlab (git-ignored) on first use.
# gitlab-ci-local needs git and rsync on PATH (Debian: apt-get install git rsync).

gitlab_ci_local_version=4.75.1

install_gitlab_ci_local() {
  local tools=$PWD/.tools/gitlab missing=""
  for tool in git rsync; do command -v "$tool" >/dev/null || missing="$missing $tool"; done
  if [ -n "$missing" ]; then
    echo "gitlab-ci-local (the GitLab fake's runner) needs:$missing. Install it (Debian: apt-get install$missing) and rerun." >&2
    return 1
  fi
  if [ ! -x "$tools/node_modules/.bin/node" ] \
      || ! grep -q "\"version\": \"$gitlab_ci_local_version\"" "$tools/node_modules/gitlab-ci-local/package.json" 2>/dev/null; then
    echo "== installing Node 22 and gitlab-ci-local@$gitlab_ci_local_version into $tools"
    mkdir -p "$tools"
    [ -f "$tools/package.json" ] || echo '{"private": true}' > "$tools/package.json"
    ( cd "$tools" && npm install --no-audit --no-fund --loglevel=error "node@22" "gitlab-ci-local@$gitlab_ci_local_version" )
  fi
  FLOWGATE_TEST_GITLAB_CI_LOCAL="$tools/node_modules/.bin/node $tools/node_modules/gitlab-ci-local/dist/index.js"
  export FLOWGATE_TEST_GITLAB_CI_LOCAL
}
