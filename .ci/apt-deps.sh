#!/bin/sh
# Install the Debian packages listed in .ci/apt-packages that are missing. Only acts as root on a
# Debian-like system; elsewhere it prints what the suite expects and carries on.
set -eu
list="$(dirname "$0")/apt-packages"
wanted=$(grep -v '^#' "$list" | tr -s ' \n' ' ')
missing=""
for pkg in $wanted; do
    dpkg -s "$pkg" >/dev/null 2>&1 || missing="$missing $pkg"
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing system packages:$missing"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing
else
    echo "note: the test suite expects these system packages:$missing" >&2
fi
