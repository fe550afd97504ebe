#!/usr/bin/env bash
# A root folder holding Debian packages as an install would leave their files, without
# installing them: each .deb of DEBS extracted (dpkg-deb -x) under ROOT, its file list written
# to ROOT/var/lib/dpkg/info/<package>.list and its version to ROOT/var/lib/dpkg/status, which
# is what searchmaps.data.english_large reads. Then: SEARCHMAPS_ENGLISH_ROOT=ROOT. Run again with
# another folder of .deb files to add them (a package's earlier stanza is replaced).
#   mkdir -p /tmp/debs && (cd /tmp/debs && apt-get download $(python -c 'import searchmaps.data.english_large as m; print(*m.debian_names())'))
#   bash experiments/english-corpus/unpack_root.sh /tmp/debs /tmp/englishroot
set -euo pipefail
debs="$1"; root="$2"
mkdir -p "$root/var/lib/dpkg/info"
status="$root/var/lib/dpkg/status"
touch "$status"
for deb in "$debs"/*.deb; do
  pkg=$(dpkg-deb -f "$deb" Package)
  dpkg-deb -x "$deb" "$root"
  { echo "/."; dpkg-deb --fsys-tarfile "$deb" | tar -t | sed -e 's|^\./|/|' -e 's|/$||' | grep -v '^/\?$'; } \
    > "$root/var/lib/dpkg/info/$pkg.list"
  awk -v p="Package: $pkg" 'BEGIN { RS = ""; ORS = "\n\n" } { split($0, l, "\n") } l[1] != p' "$status" > "$status.new"
  printf 'Package: %s\nStatus: install ok installed\nVersion: %s\n\n' "$pkg" "$(dpkg-deb -f "$deb" Version)" >> "$status.new"
  mv "$status.new" "$status"
done
