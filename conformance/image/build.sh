#!/usr/bin/env bash
# Builds the conformance server image (etcd, ZooKeeper, Redis from Debian
# bookworm's packages) without any image registry: debootstrap a minimal
# rootfs, add our start scripts, `docker import` it.
#
#   conformance/image/build.sh            build tenure-conformance/servers:$(cat VERSION) if missing
#   FORCE=1 conformance/image/build.sh    re-import from the cached rootfs (no debootstrap)
#
# Idempotent: exits 0 at once when the image exists. The debootstrapped rootfs
# and the downloaded .debs are cached under $TENURE_IMAGE_CACHE (default
# /var/cache/tenure-conformance), so a re-import after `docker rmi` or a change
# of our own scripts takes seconds. Bump VERSION whenever anything that ends up
# in the image changes (the harness asks for tenure-conformance/servers:VERSION).
# Concurrent callers are serialized with flock(1) on $cache/build.lock.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
version="$(tr -d '[:space:]' < "$here/VERSION")"
image="tenure-conformance/servers:$version"
cache="${TENURE_IMAGE_CACHE:-/var/cache/tenure-conformance}"
suite=bookworm
# libzookeeper-java, not zookeeper: the zookeeper package only adds init
# scripts and sample config but depends on default-jre, which pulls in X11.
# etcd-client (etcdctl) and Curator with a JDK are the real peers of the interop tests.
packages=etcd-server,etcd-client,redis-server,libzookeeper-java,libcurator-recipes-java,libcurator-framework-java,default-jdk-headless,procps,iproute2,ca-certificates
# The debootstrapped rootfs is cached per package set, as a directory.
rootfs="$cache/rootfs-$(echo "$suite $packages" | sha256sum | cut -c1-12)"

log() { echo "build.sh: $*" >&2; }

image_exists() { docker image inspect "$image" >/dev/null 2>&1; }

if [[ -z "${FORCE:-}" ]] && image_exists; then
  exit 0
fi

mkdir -p "$cache/debs"
# One builder per machine; a second caller waits and then finds the image.
exec 9>"$cache/build.lock"
flock 9
if [[ -z "${FORCE:-}" ]] && image_exists; then
  exit 0
fi

# The Debian mirror apt on this machine uses (deb822 or one-line format), so
# the build works wherever `apt-get install` does. MIRROR overrides.
find_mirror() {
  local f uri
  for f in /etc/apt/sources.list.d/*.sources; do
    [[ -f "$f" ]] || continue
    # A stanza whose URIs serve "$suite" (not -security/-updates) of Debian.
    uri="$(awk -v suite="$suite" '
      BEGIN { RS=""; FS="\n" }
      {
        u=""; s=0
        for (i=1;i<=NF;i++) {
          if ($i ~ /^URIs:/) { sub(/^URIs:[ \t]*/, "", $i); split($i, a, /[ \t]+/); u=a[1] }
          if ($i ~ /^Suites:/) { n=split($i, b, /[ \t]+/); for (j=2;j<=n;j++) if (b[j]==suite) s=1 }
        }
        if (u != "" && s) { print u; exit }
      }' "$f")"
    if [[ -n "$uri" ]]; then echo "$uri"; return; fi
  done
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [[ -f "$f" ]] || continue
    uri="$(awk -v suite="$suite" '$1=="deb" && $0 !~ /\[/ && $3==suite { print $2; exit }
                                  $1=="deb" && $2 ~ /^\[/ && $4==suite { print $3; exit }' "$f")"
    if [[ -n "$uri" ]]; then echo "$uri"; return; fi
  done
  echo http://deb.debian.org/debian
}

if [[ ! -e "$rootfs.done" ]]; then
  if ! command -v debootstrap >/dev/null 2>&1; then
    log "installing debootstrap"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
  fi
  mirror="${MIRROR:-$(find_mirror)}"
  rm -rf "$rootfs"
  log "debootstrap $suite from $mirror into $rootfs"
  debootstrap --variant=minbase --cache-dir="$cache/debs" --include="$packages" \
    "$suite" "$rootfs" "$mirror" >"$cache/debootstrap.log" 2>&1 || {
    tail -n 40 "$cache/debootstrap.log" >&2
    exit 1
  }
  # Keep it small: nothing here is needed at run time.
  rm -rf "$rootfs"/var/cache/apt/* "$rootfs"/var/lib/apt/lists/* \
    "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/* \
    "$rootfs"/usr/share/locale/* "$rootfs"/var/log/*.log "$rootfs"/tmp/*
  # debootstrap copies the host's resolv.conf and hostname; docker provides its own.
  : > "$rootfs/etc/resolv.conf"
  : > "$rootfs/etc/hostname"
  touch "$rootfs.done"
fi

# Our files go in at import time, so changing them never re-runs debootstrap.
install -m 0755 "$here/zookeeper-server" "$rootfs/usr/local/bin/zookeeper-server"
install -d "$rootfs/etc/zookeeper-conformance"
install -m 0644 "$here/log4j.properties" "$rootfs/etc/zookeeper-conformance/log4j.properties"
echo "$version" > "$rootfs/etc/tenure-conformance-version"

log "importing $rootfs as $image"
tar -C "$rootfs" --numeric-owner -c . | docker import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' \
  --change "LABEL tenure.conformance.image=$version" \
  --change 'CMD ["/bin/bash"]' \
  - "$image" >/dev/null
log "built $image"
