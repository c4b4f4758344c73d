#!/usr/bin/env bash
# Builds the Go peers of the conformance suite from Debian 13 (trixie)'s
# packages, with no download but Debian's: client-go's leader election
# (golang-k8s-client-go-dev), etcd's clientv3/concurrency recipe
# (golang-etcd-server-dev), and kubectl (kubernetes-client).
#
#   conformance/peers/build.sh          build if missing; prints the directory holding
#                                       client-go-candidate, etcd-recipe-candidate, kubectl
#   FORCE=1 conformance/peers/build.sh  rebuild the binaries (the trixie tree stays cached)
#   CHECK=1 conformance/peers/build.sh  print the directory if built, else exit 3 building nothing
#
# Two cached stages under $TENURE_IMAGE_CACHE (default /var/cache/tenure-conformance):
#   peers-rootfs-<hash of suite and packages>/  a debootstrapped trixie tree with only
#       ca-certificates (an --include of the Go packages fails: two protobuf packages
#       conflict and debootstrap cannot resolve it), then apt-get install inside.
#       Nothing of trixie is added to this machine's own apt sources.
#   peers-<hash of the sources, this script and the package set>/  the binaries.
# The build itself runs chrooted in a new network namespace with no interface
# but lo, so it proves that nothing is downloaded: GOPATH mode over the sources
# Debian installs in /usr/share/gocode, GOPROXY=off, GOFLAGS empty.
# Idempotent: a second run finds the binaries and prints their directory at once.
# Concurrent callers are serialized with flock(1) on $cache/peers.lock.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="${TENURE_IMAGE_CACHE:-/var/cache/tenure-conformance}"
suite=trixie
packages="golang-go golang-k8s-client-go-dev golang-etcd-server-dev kubernetes-client"
programs=(client-go-candidate etcd-recipe-candidate)
rootfs="$cache/peers-rootfs-$(echo "$suite ca-certificates $packages" | sha256sum | cut -c1-12)"
sources_hash="$(
  cd "$here"
  {
    echo "$suite $packages"
    cat build.sh
    for p in "${programs[@]}"; do find "$p" -type f -name '*.go' | sort | xargs sha256sum; done
  } | sha256sum | cut -c1-12
)"
out="$cache/peers-$sources_hash"

log() { echo "peers/build.sh: $*" >&2; }

built() { [[ -z "${FORCE:-}" && -e "$out/.done" ]]; }

if built; then
  echo "$out"
  exit 0
fi
if [[ -n "${CHECK:-}" ]]; then
  exit 3
fi

mkdir -p "$cache/debs-$suite"
# One builder per machine; a second caller waits and then finds the binaries.
exec 9>"$cache/peers.lock"
flock 9
if built; then
  echo "$out"
  exit 0
fi

# The Debian archive this machine's apt uses (deb822 or one-line format), so the
# build works wherever `apt-get install` does; any suite of it serves trixie too.
# MIRROR overrides.
find_mirror() {
  local f uri
  for f in /etc/apt/sources.list.d/*.sources; do
    [[ -f "$f" ]] || continue
    uri="$(awk '
      BEGIN { RS=""; FS="\n" }
      {
        u=""; s=0
        for (i=1;i<=NF;i++) {
          if ($i ~ /^URIs:/) { sub(/^URIs:[ \t]*/, "", $i); split($i, a, /[ \t]+/); u=a[1] }
          if ($i ~ /^Suites:/) { n=split($i, b, /[ \t]+/); for (j=2;j<=n;j++) if (b[j] ~ /^(bookworm|trixie|stable|testing)$/) s=1 }
        }
        if (u != "" && s) { print u; exit }
      }' "$f")"
    if [[ -n "$uri" ]]; then echo "$uri"; return; fi
  done
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [[ -f "$f" ]] || continue
    uri="$(awk '$1=="deb" && $0 !~ /\[/ && $3 ~ /^(bookworm|trixie|stable|testing)$/ { print $2; exit }
                $1=="deb" && $2 ~ /^\[/ && $4 ~ /^(bookworm|trixie|stable|testing)$/ { print $3; exit }' "$f")"
    if [[ -n "$uri" ]]; then echo "$uri"; return; fi
  done
  echo http://deb.debian.org/debian
}

# Runs a command chrooted in the tree with its own /proc (Go and dpkg need it),
# in a private mount and pid namespace so nothing stays mounted afterwards.
# Extra unshare(1) flags come first (--net for the offline build).
in_tree() {
  local flags=()
  while [[ "${1:-}" == --* ]]; do flags+=("$1"); shift; done
  unshare --mount --pid --fork --mount-proc="$rootfs/proc" "${flags[@]}" \
    chroot "$rootfs" /usr/bin/env -i \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    HOME=/root LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive "$@"
}

started=$SECONDS
if [[ ! -e "$rootfs.done" ]]; then
  if ! command -v debootstrap >/dev/null 2>&1; then
    log "installing debootstrap"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
  fi
  if [[ ! -e /usr/share/debootstrap/scripts/$suite ]]; then
    log "this debootstrap does not know $suite; upgrade it"
    exit 1
  fi
  mirror="${MIRROR:-$(find_mirror)}"
  rm -rf "$rootfs"
  log "debootstrap $suite from $mirror into $rootfs"
  debootstrap --variant=minbase --cache-dir="$cache/debs-$suite" --include=ca-certificates \
    "$suite" "$rootfs" "$mirror" >"$cache/peers-debootstrap.log" 2>&1 || {
    tail -n 40 "$cache/peers-debootstrap.log" >&2
    exit 1
  }
  cp /etc/resolv.conf "$rootfs/etc/resolv.conf"
  log "apt-get install $packages (inside the tree)"
  {
    in_tree apt-get update &&
      in_tree apt-get install -y --no-install-recommends $packages
  } >"$cache/peers-apt.log" 2>&1 || {
    tail -n 40 "$cache/peers-apt.log" >&2
    exit 1
  }
  in_tree apt-get clean
  : > "$rootfs/etc/resolv.conf"
  touch "$rootfs.done"
  log "trixie tree ready in $((SECONDS - started)) s"
fi

# Our sources go in fresh each time; Go's build cache in the tree stays, so a
# change to one program recompiles only that program.
rm -rf "$rootfs/build"
mkdir -p "$rootfs/build/out"
for p in "${programs[@]}"; do
  cp -r "$here/$p" "$rootfs/build/$p"
done
build_started=$SECONDS
for p in "${programs[@]}"; do
  log "go build $p (offline)"
  in_tree --net GO111MODULE=off GOPATH=/usr/share/gocode GOPROXY=off GOFLAGS= \
    GOTOOLCHAIN=local CGO_ENABLED=0 GOCACHE=/root/.cache/go-build \
    sh -c "cd /build/$p && exec go build -trimpath -o /build/out/$p ."
done
log "go build took $((SECONDS - build_started)) s"

rm -rf "$out.tmp"
mkdir -p "$out.tmp"
for p in "${programs[@]}"; do
  install -m 0755 "$rootfs/build/out/$p" "$out.tmp/$p"
done
install -m 0755 "$rootfs$(in_tree readlink -f /usr/bin/kubectl)" "$out.tmp/kubectl"
in_tree dpkg-query -W $packages golang-1.24-go >"$out.tmp/VERSIONS"
rm -rf "$out"
mv "$out.tmp" "$out"
touch "$out/.done"
# Binaries of older sources go (150 MB each); the tree and Go's cache stay.
for old in "$cache"/peers-????????????; do
  if [[ "$old" != "$out" && -e "$old/.done" ]]; then rm -rf "$old"; fi
done
log "peers ready in $out ($((SECONDS - started)) s)"
echo "$out"
