#!/usr/bin/env bash
# Runs the README's two commands (./scripts/run.sh, then ./scripts/test.sh)
# as a new user would: in a clean Debian 12 root made with debootstrap
# (--variant=minbase, from the Debian mirror this machine's apt uses), with
# /proc, /sys, /dev, /dev/pts and a fresh /dev/shm mounted, the host's CA
# trust store (so npm's TLS works wherever the host's does) and DNS, and a
# copy of the checkout's current commit (git archive HEAD: tracked files
# only, no build/). Prints how long each command took (and how long run.sh
# took to print its first training line) and ctest's summary.
# Run it before resolving any issue that changes dependencies, scripts or
# the README. Needs root (debootstrap, mount, chroot); takes a long while.
#
#   sudo scripts/fresh-check.sh                      # a new root in /var/tmp, removed at the end
#   sudo scripts/fresh-check.sh --tarball /var/tmp/bookworm-minbase.tgz   # cache debootstrap's packages
#   sudo scripts/fresh-check.sh --keep-root --root /var/tmp/fresh          # keep the root to look inside
#
# Options:
#   --root DIR      where to build the root (must not exist, or be empty)
#   --keep-root     leave the root in place at the end (mounts are undone either way)
#   --tarball FILE  debootstrap --unpack-tarball FILE if it exists, else make it first
#                   (--make-tarball) and then use it: later runs download nothing for the base
#   --mirror URL    Debian mirror (default: the one in /etc/apt/sources.list*)
#   --skip-run      only the test command
#   --run-only      only the main job's command (e.g. to time it before and after a change)
#   --commit REV    check commit REV of this checkout instead of HEAD
#   --ctest ARGS    extra arguments for ctest (one string, e.g. "-R Conv2d")
# Exit status: 0 when both commands succeeded.

# The whole script is one compound command, so bash has read all of it
# before it runs: editing or checking out the file during the hour it runs
# does not change what runs.
# shellcheck disable=SC2317  # cleanup runs from a trap, which shellcheck does not follow
{
set -euo pipefail

ROOT=""
KEEP=0
TARBALL=""
MIRROR=""
SKIP_RUN=0
RUN_ONLY=0
REV=HEAD
CTEST_ARGS=""
while [ $# -gt 0 ]; do
  case "$1" in
    --root) ROOT=$2; shift 2 ;;
    --keep-root) KEEP=1; shift ;;
    --tarball) TARBALL=$2; shift 2 ;;
    --mirror) MIRROR=$2; shift 2 ;;
    --skip-run) SKIP_RUN=1; shift ;;
    --run-only) RUN_ONLY=1; shift ;;
    --commit) REV=$2; shift 2 ;;
    --ctest) CTEST_ARGS=$2; shift 2 ;;
    -h|--help) sed -n '2,/^# Exit status/p' "$0"; exit 0 ;;
    *) echo "fresh-check: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

die() { echo "fresh-check: $*" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || die "needs root (debootstrap, mount, chroot); run it with sudo"
command -v debootstrap >/dev/null || die "debootstrap not found; apt-get install debootstrap"
REPO=$(git -C "$(dirname "$0")" rev-parse --show-toplevel) || die "not inside a git checkout"
COMMIT=$(git -C "$REPO" rev-parse --verify "$REV^{commit}") || die "--commit $REV: not a commit of $REPO"
if [ -n "$(git -C "$REPO" status --porcelain --untracked-files=no)" ]; then
  echo "fresh-check: note: uncommitted changes are not checked; the root gets commit ${COMMIT:0:10}"
fi
[ "$SKIP_RUN" = 0 ] || [ "$RUN_ONLY" = 0 ] || die "--skip-run and --run-only leave nothing to run"

# The mirror apt uses here: deb822 .sources (URIs:) or one-line .list entries
# for bookworm, security excluded.
host_mirror() {
  local f
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    awk '/^URIs:/ {u=$2} /^Suites:/ && /bookworm( |$)/ && u !~ /security/ {print u; exit}' "$f"
  done
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] || continue
    awk '$1 == "deb" && $3 == "bookworm" && $2 !~ /security/ {print $2; exit}' "$f"
  done
}
[ -n "$MIRROR" ] || MIRROR=$(host_mirror | head -1)
[ -n "$MIRROR" ] || MIRROR=http://deb.debian.org/debian
SECURITY=${MIRROR%/debian}/debian-security
[ "$SECURITY" != "$MIRROR/debian-security" ] || SECURITY=http://security.debian.org/debian-security

if [ -z "$ROOT" ]; then
  ROOT=$(mktemp -d /var/tmp/qk-fresh.XXXXXX)
else
  mkdir -p "$ROOT"
  [ -z "$(ls -A "$ROOT")" ] || die "--root $ROOT is not empty"
fi
ROOT=$(cd "$ROOT" && pwd)
[ "$ROOT" != "/" ] || die "refusing to use / as the root"
chmod 755 "$ROOT"  # it is /, which everyone traverses (mktemp makes it 0700; apt's _apt user needs in)
LOG_DIR=$(mktemp -d /var/tmp/qk-fresh-logs.XXXXXX)

# Every mount under $ROOT, deepest first (ours, and any a test left behind,
# e.g. a network namespace under /run/netns), so the cleanup can undo all.
mounts_under_root() {
  awk -v r="$ROOT" '{ gsub(/\\040/, " ", $5); if ($5 == r || index($5, r "/") == 1) print $5 }' \
    /proc/self/mountinfo | awk '{ print length($0) " " $0 }' | sort -rn | cut -d' ' -f2-
}
cleanup() {
  local rc=$?
  set +e
  local m
  for _ in 1 2 3; do
    while read -r m; do
      [ -n "$m" ] || continue
      umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null
    done < <(mounts_under_root)
    [ -z "$(mounts_under_root)" ] && break
    sleep 1
  done
  if [ -n "$(mounts_under_root)" ]; then
    echo "fresh-check: could not unmount everything under $ROOT; left it in place:" >&2
    mounts_under_root >&2
  elif [ "$KEEP" = 1 ]; then
    echo "fresh-check: root kept at $ROOT (chroot $ROOT /bin/bash; remove with rm -rf)"
  else
    rm -rf --one-file-system "$ROOT"
  fi
  echo "fresh-check: logs in $LOG_DIR"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

now() { date +%s; }
# Passes its input through; the first line that starts training (qk train's
# "training N epochs, ...") writes the time it arrived into FILE.
note_first_training_line() {
  local file=$1 line
  while IFS= read -r line; do
    if [ ! -e "$file" ] && [[ "$line" =~ ^(\[rank[0-9]+\]:\ )?training\ [0-9]+\ epochs ]]; then now >"$file"; fi
    printf '%s\n' "$line"
  done
}
fmt_s() { printf '%dm%02ds' $(($1 / 60)) $(($1 % 60)); }

echo "fresh-check: commit ${COMMIT:0:10}, root $ROOT, mirror $MIRROR"
t0=$(now)
if [ -n "$TARBALL" ]; then
  if [ ! -f "$TARBALL" ]; then
    echo "fresh-check: making the debootstrap tarball $TARBALL"
    scratch=$(mktemp -d /var/tmp/qk-fresh-tarball.XXXXXX)
    debootstrap --variant=minbase --make-tarball="$TARBALL" bookworm "$scratch" "$MIRROR" \
      >"$LOG_DIR/debootstrap-tarball.log" 2>&1 || { rm -rf "$scratch"; die "debootstrap --make-tarball failed; see $LOG_DIR/debootstrap-tarball.log"; }
    rm -rf "$scratch"
  fi
  debootstrap --variant=minbase --unpack-tarball="$(cd "$(dirname "$TARBALL")" && pwd)/$(basename "$TARBALL")" \
    bookworm "$ROOT" "$MIRROR" >"$LOG_DIR/debootstrap.log" 2>&1 ||
    die "debootstrap failed; see $LOG_DIR/debootstrap.log"
else
  debootstrap --variant=minbase bookworm "$ROOT" "$MIRROR" >"$LOG_DIR/debootstrap.log" 2>&1 ||
    die "debootstrap failed; see $LOG_DIR/debootstrap.log"
fi
t_debootstrap=$(($(now) - t0))
echo "fresh-check: debootstrap took $(fmt_s $t_debootstrap)"

# What a Debian 12 installation has: the release, its updates and security.
cat >"$ROOT/etc/apt/sources.list" <<EOF
deb $MIRROR bookworm main
deb $MIRROR bookworm-updates main
deb $SECURITY bookworm-security main
EOF
# Packages may not start daemons inside the root.
printf '#!/bin/sh\nexit 101\n' >"$ROOT/usr/sbin/policy-rc.d"
chmod 755 "$ROOT/usr/sbin/policy-rc.d"
# DNS, and the host's CA trust store: its certificates (links resolved) and
# the local CAs update-ca-certificates adds when the root installs ca-certificates.
cp -L /etc/resolv.conf "$ROOT/etc/resolv.conf"
mkdir -p "$ROOT/etc/ssl" "$ROOT/usr/local/share/ca-certificates"
if [ -d /etc/ssl/certs ]; then
  cp -rL /etc/ssl/certs "$ROOT/etc/ssl/" 2>"$LOG_DIR/certs.log" ||
    echo "fresh-check: note: some of /etc/ssl/certs did not copy (broken links?): $LOG_DIR/certs.log"
fi
if [ -d /usr/local/share/ca-certificates ]; then
  cp -rL /usr/local/share/ca-certificates/. "$ROOT/usr/local/share/ca-certificates/"
fi

mkdir -p "$ROOT/src/qianka"
git -C "$REPO" archive --format=tar "$COMMIT" | tar -x -C "$ROOT/src/qianka"

mount -t proc proc "$ROOT/proc"
mount -t sysfs sysfs "$ROOT/sys"
mount --bind /dev "$ROOT/dev"
mount --bind /dev/pts "$ROOT/dev/pts"
mount -t tmpfs -o mode=1777,nosuid,nodev shm "$ROOT/dev/shm"

# A login-like environment: nothing of the caller's (no ccache, no CI=true).
in_root() {
  chroot "$ROOT" /usr/bin/env -i HOME=/root USER=root LOGNAME=root LANG=C.UTF-8 TERM=dumb \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    NODE_EXTRA_CA_CERTS=/etc/ssl/certs/ca-certificates.crt \
    /bin/bash -c "cd /src/qianka && $1"
}

run_rc=0
t_run=0
if [ "$SKIP_RUN" = 0 ]; then
  echo "fresh-check: ./scripts/run.sh (log $LOG_DIR/run.log)"
  t0=$(now)
  t_run_start=$t0
  set +e
  in_root "./scripts/run.sh" 2>&1 | tee "$LOG_DIR/run.log" | note_first_training_line "$LOG_DIR/run.first-training" |
    sed -u 's/^/  run| /'
  run_rc=${PIPESTATUS[0]}
  set -e
  t_run=$(($(now) - t0))
fi
test_rc=0
t_test=0
if [ "$RUN_ONLY" = 0 ]; then
  echo "fresh-check: ./scripts/test.sh $CTEST_ARGS (log $LOG_DIR/test.log)"
  t0=$(now)
  set +e
  in_root "./scripts/test.sh $CTEST_ARGS" 2>&1 | tee "$LOG_DIR/test.log" | sed -u 's/^/  test| /'
  test_rc=${PIPESTATUS[0]}
  set -e
  t_test=$(($(now) - t0))
fi

echo
echo "================ fresh-check summary ================"
echo "commit:        $COMMIT"
echo "root:          debootstrap --variant=minbase bookworm from $MIRROR ($(fmt_s $t_debootstrap))"
if [ "$SKIP_RUN" = 0 ]; then
  first="no training line"
  [ -f "$LOG_DIR/run.first-training" ] && first="first training line after $(fmt_s $(($(cat "$LOG_DIR/run.first-training") - t_run_start)))"
  echo "./scripts/run.sh:  exit $run_rc after $(fmt_s $t_run) ($first)"
else
  echo "./scripts/run.sh:  skipped"
fi
if [ "$RUN_ONLY" = 0 ]; then
  echo "./scripts/test.sh: exit $test_rc after $(fmt_s $t_test)"
  echo "ctest:"
  grep -E '^[0-9]+% tests passed|^Total Test time|^The following tests (FAILED|did not run)|^[[:space:]]+[0-9]+ - ' \
    "$LOG_DIR/test.log" | sed 's/^/  /' || echo "  (no ctest summary in $LOG_DIR/test.log)"
  skipped=$(grep -c -E '\*\*\*Skipped|Not Run' "$LOG_DIR/test.log" || true)
  echo "  skipped or not run: $skipped"
else
  echo "./scripts/test.sh: skipped (--run-only)"
fi
echo "====================================================="
[ "$run_rc" -eq 0 ] && [ "$test_rc" -eq 0 ]
exit
}
