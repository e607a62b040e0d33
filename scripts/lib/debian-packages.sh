# Sourced by scripts/test and scripts/balancer: installs Debian packages the tests run (their
# binaries only; no service is started for them).
#
#   install_debian_packages PACKAGE...    returns non-zero when they cannot be installed here
#
# Needs root and apt-get. policy-rc.d refuses service starts during the install (a package such
# as nginx would otherwise start itself on port 80 on a machine with an init).

install_debian_packages() {
  [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null || return 1
  echo "== installing $* (Debian packages)"
  local own_policy=
  printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d.flowgate && chmod +x /usr/sbin/policy-rc.d.flowgate
  if [ ! -e /usr/sbin/policy-rc.d ]; then ln -s /usr/sbin/policy-rc.d.flowgate /usr/sbin/policy-rc.d; own_policy=1; fi
  local rc=0
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null; } || rc=$?
  [ -z "$own_policy" ] || rm -f /usr/sbin/policy-rc.d
  rm -f /usr/sbin/policy-rc.d.flowgate
  return "$rc"
}
