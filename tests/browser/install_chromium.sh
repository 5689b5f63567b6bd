#!/usr/bin/env bash
# Install a headless-capable Chromium for the report's browser test (run as root; idempotent).
#
#   tests/browser/install_chromium.sh     # prints the browser's path on its last line
#
# Debian's `chromium` package; nothing is downloaded outside the distribution's apt sources
# (Playwright's own browser download is not used). The package index is refreshed once, and
# only when the package is missing.
set -euo pipefail

T0=$(date +%s%N)
log() {
    local ms=$(( ($(date +%s%N) - T0) / 1000000 ))
    printf '[install_chromium %3d.%01ds] %s\n' $((ms / 1000)) $((ms % 1000 / 100)) "$*"
}
die() { echo "install_chromium: ERROR: $*" >&2; exit 1; }

find_chromium() {
    local name
    for name in chromium chromium-browser google-chrome; do
        if command -v "$name" >/dev/null; then command -v "$name"; return 0; fi
    done
    return 1
}

if path=$(find_chromium); then
    log "already installed: $path"
else
    [[ $(id -u) == 0 ]] || die "chromium is missing and installing it needs root"
    export DEBIAN_FRONTEND=noninteractive
    log "apt-get update"
    apt-get update -qq
    log "apt-get install chromium"
    # fonts: without any, the page renders as boxes (the test's screenshot would be useless)
    apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null
    path=$(find_chromium) || die "chromium installed but not on PATH"
    log "installed: $path"
fi
"$path" --version
echo "$path"
