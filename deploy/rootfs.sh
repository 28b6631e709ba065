#!/usr/bin/env bash
# Build (once) and cache the Debian root filesystem that Molecule's instances boot with
# systemd-nspawn; print its path. The cache key is a hash of the package list and of this
# script, so changing either builds a new one; older ones are removed.
#
#   deploy/rootfs.sh [CACHE_DIR]      default /var/cache/txcluster-molecule
#
# Needs root and debootstrap (Makefile DEBIAN_PACKAGES). The mirror is Debian's package
# registry; nothing else is downloaded. The instances themselves get no network beyond the
# test bridge: everything the roles install comes from the controller's wheelhouse.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cache=${1:-${TXCLUSTER_ROOTFS_CACHE:-/var/cache/txcluster-molecule}}
suite=bookworm
mirror=${TXCLUSTER_DEBIAN_MIRROR:-http://deb.debian.org/debian}
packages=$(grep -v '^\s*#' "$here/rootfs-packages.txt" | grep -v '^\s*$' | paste -sd, -)
key=$( { echo "$suite"; echo "$packages"; cat "$0"; } | sha256sum | cut -c1-16)
target="$cache/rootfs-$key"

if [ -f "$target/.complete" ]; then
  echo "$target"
  exit 0
fi

mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9  # two runs on one machine build it once
if [ -f "$target/.complete" ]; then
  echo "$target"
  exit 0
fi

building="$cache/.building-$key"
rm -rf "$building"
echo "building root filesystem $target (debootstrap $suite: $packages)" >&2
start=$(date +%s)
debootstrap --variant=minbase --include="$packages" "$suite" "$building" "$mirror" \
  > "$cache/debootstrap-$key.log" 2>&1 || {
  tail -30 "$cache/debootstrap-$key.log" >&2
  exit 1
}

# Offline enabling (no systemd bus here): systemctl --root edits the unit symlinks only.
systemctl --root="$building" enable systemd-networkd.service >/dev/null 2>&1
systemctl --root="$building" enable ssh.service >/dev/null 2>&1
# Timers that would reach for the network or churn the disk during a test.
for unit in apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer fstrim.timer; do
  systemctl --root="$building" mask "$unit" >/dev/null 2>&1 || true
done
# Each instance gets its own machine id at first boot.
: > "$building/etc/machine-id"
rm -f "$building/var/lib/dbus/machine-id"
# Root logs in with the per-run key only (create.yml writes authorized_keys).
mkdir -p "$building/root/.ssh"
chmod 700 "$building/root/.ssh"
cat > "$building/etc/ssh/sshd_config.d/txcluster-molecule.conf" <<'CONF'
PermitRootLogin prohibit-password
PasswordAuthentication no
UseDNS no
CONF
# A volatile journal is enough for tests and keeps the upper dirs small.
mkdir -p "$building/etc/systemd/journald.conf.d"
printf '[Journal]\nStorage=volatile\n' > "$building/etc/systemd/journald.conf.d/volatile.conf"
rm -rf "$building/var/cache/apt/archives/"*.deb "$building/var/lib/apt/lists/"*

touch "$building/.complete"
for old in "$cache"/rootfs-*; do
  [ "$old" = "$target" ] || [ ! -d "$old" ] || rm -rf "$old"
done
mv "$building" "$target"
echo "built $target in $(( $(date +%s) - start )) s" >&2
echo "$target"
