#!/usr/bin/env bash
# Installs Debian's Chromium (/usr/bin/chromium), which the dashboard's
# end-to-end test (test/e2e/dashboard_test.go) drives headless through
# the DevTools protocol (chromedp); the test fails, never skips, without
# it.
#
# Idempotent: nothing is done when /usr/bin/chromium exists, and
# `apt-get update` runs only when the package must be installed. Needs
# root for that; hack/test.sh calls it.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

if [[ -x /usr/bin/chromium ]]; then
	echo "Chromium already installed: $(/usr/bin/chromium --version 2>/dev/null || echo /usr/bin/chromium)"
	exit 0
fi
if [[ $(id -u) != 0 ]]; then
	echo "install-chromium: Chromium is not installed, and installing it needs root (apt-get)" >&2
	exit 1
fi
if ! command -v apt-get >/dev/null 2>&1; then
	echo "install-chromium: no apt-get; install Chromium as /usr/bin/chromium by hand" >&2
	exit 1
fi
export DEBIAN_FRONTEND=noninteractive
echo "install-chromium: apt-get install chromium..." >&2
# --no-install-recommends: no fonts or extras beyond what headless
# rendering needs; fonts-dejavu-core gives the screenshot legible text.
apt_install --no-install-recommends chromium fonts-dejavu-core >/dev/null
if [[ ! -x /usr/bin/chromium ]]; then
	echo "install-chromium: chromium installed, but no /usr/bin/chromium" >&2
	exit 1
fi
echo "Chromium installed: $(/usr/bin/chromium --version 2>/dev/null)"
