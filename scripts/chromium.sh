#!/usr/bin/env bash
# chromium.sh — make sure the browser for api/browser_test.go is installed:
# Debian's chromium package, /usr/bin/chromium. `make test` runs it before
# `go test`, so a clean clone (CI: .ci/run) installs Chromium by itself.
#
#   scripts/chromium.sh
#
# Does nothing (and takes no time) when /usr/bin/chromium is there, or when
# CHROMIUM names an executable (the test uses that one instead). Otherwise,
# as root, installs the package with apt-get (without recommended packages);
# not root: fails with a message saying what to install.
set -euo pipefail

log() { echo "chromium.sh: $*" >&2; }

if [ -n "${CHROMIUM:-}" ]; then
  [ -x "$CHROMIUM" ] && exit 0
  log "CHROMIUM=$CHROMIUM is not an executable file"
  exit 1
fi

[ -x /usr/bin/chromium ] && exit 0

if [ "$(id -u)" != 0 ]; then
  log "no /usr/bin/chromium and not root: install Debian's chromium package (sudo apt-get install chromium), or set CHROMIUM to a Chrome or Chromium binary"
  exit 1
fi

log "installing Chromium (apt-get install chromium)"
apt-get update -qq >&2
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null
[ -x /usr/bin/chromium ] || { log "the chromium package is installed but /usr/bin/chromium is not there"; exit 1; }
log "installed $(/usr/bin/chromium --version 2>/dev/null || echo chromium)"
