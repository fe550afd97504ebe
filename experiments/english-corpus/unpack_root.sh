#!/usr/bin/env bash
# A root folder holding Debian packages as an install would leave their files, without
# installing them: each .deb of DEBS extracted (dpkg-deb -x) under ROOT, its file list written
# to ROOT/var/lib/dpkg/info/<package>.list and its version to ROOT/var/lib/dpkg/status, which
# is what searchmaps.english_large reads. Then: SEARCHMAPS_ENGLISH_ROOT=ROOT.
#   mkdir -p /tmp/debs && (cd /tmp/debs && apt-get download $(python -c 'import searchmaps.english_large as m; print(*m.debian_names())'))
#   bash experiments/english-corpus/unpack_root.sh /tmp/debs /tmp/englishroot
set -euo pipefail
debs="$1"; root="$2"
mkdir -p "$root/var/lib/dpkg/info"
: > "$root/var/lib/dpkg/status"
for deb in "$debs"/*.deb; do
  pkg=$(dpkg-deb -f "$deb" Package)
  dpkg-deb -x "$deb" "$root"
  { echo "/."; dpkg-deb --fsys-tarfile "$deb" | tar -t | sed -e 's|^\./|/|' -e 's|/$||' | grep -v '^/\?$'; } \
    > "$root/var/lib/dpkg/info/$pkg.list"
  printf 'Package: %s\nStatus: install ok installed\nVersion: %s\n\n' "$pkg" "$(dpkg-deb -f "$deb" Version)" \
    >> "$root/var/lib/dpkg/status"
done
