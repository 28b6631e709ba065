#!/usr/bin/env bash
# Real systemd hosts for Molecule: systemd-nspawn instances booted from the cached root
# filesystem (deploy/rootfs.sh), one overlayfs upper dir each, reached by SSH over a host
# bridge that `up` creates and `down` removes (see docs/design/dependencies.md,
# "systemd-nspawn hosts for the deployment tests").
#
#   nspawn-hosts.sh up STATE ROOTFS BRIDGE HOST_CIDR PUBKEY NAME=ADDR...
#   nspawn-hosts.sh down STATE
#
# STATE is a directory recording what `up` made (bridge name, each instance's nspawn PID,
# overlay mount); `down` undoes exactly that and nothing else: it kills only the PIDs it
# recorded (after checking they are still that machine's systemd-nspawn), unmounts only its
# overlays, deletes only its bridge. `down` is safe to run on a half-made or absent STATE,
# so create.yml runs it first to clear what an interrupted run left.
#
# Network: the bridge gets HOST_CIDR (a /24 that must be unused on this machine), the
# instances static addresses in it and no default route, so they can reach nothing but
# each other and the controller's bridge address. /etc/hosts is written in each instance
# (fact gathering otherwise stalls on DNS).
set -Eeuo pipefail
# A command that fails under set -e says which one, in functions too (-E): a create once
# failed with rc 1 and nothing on stderr, 0.14 s in, beside the suite (2026-12-03; not
# reproduced).
trap 'echo "nspawn-hosts: line $LINENO: \"$BASH_COMMAND\" exited $?" >&2' ERR

die() { echo "nspawn-hosts: $*" >&2; exit 1; }

machine_name() { echo "txm-$1"; }  # short: nspawn's host-side veth is vb-<name>

nspawn_pid_ok() {  # PID still the systemd-nspawn of machine $2?
  local pid=$1 machine=$2
  [ -r "/proc/$pid/cmdline" ] || return 1
  tr '\0' ' ' < "/proc/$pid/cmdline" | grep -q "systemd-nspawn .*-M $machine "
}

# The instance's init, by the PID and PID namespace recorded at boot: killing it ends
# every process of the instance (a PID namespace dies with its init), which killing
# systemd-nspawn alone does not do.
leader_ok() {  # $1 = instance dir: its recorded init still alive, same namespace?
  local dir=$1 pid ns
  read -r pid ns < "$dir/leader" 2>/dev/null || return 1
  [ "$(readlink "/proc/$pid/ns/pid" 2>/dev/null)" = "$ns" ]
}

kill_leader() {
  local dir=$1 pid ns
  leader_ok "$dir" || return 0
  read -r pid ns < "$dir/leader"
  kill -KILL "$pid" 2>/dev/null || true
  for _ in $(seq 1 50); do leader_ok "$dir" || return 0; sleep 0.1; done
}

cmd_down() {
  local state=$1
  [ -d "$state" ] || return 0
  local dir name machine pid
  # Ask every instance to power off first (in parallel: each shuts down on its own).
  for dir in "$state"/instances/*/; do
    [ -d "$dir" ] || continue
    name=$(basename "$dir")
    machine=$(machine_name "$name")
    pid=$(cat "$dir/pid" 2>/dev/null || true)
    if [ -n "$pid" ] && nspawn_pid_ok "$pid" "$machine"; then
      kill -TERM "$pid" 2>/dev/null || true  # nspawn asks the container to power off
    fi
  done
  # A test instance being thrown away needs no long goodbye: whatever is still running
  # after 10 s (a service waiting on peers that are already gone) is killed with its init.
  for dir in "$state"/instances/*/; do
    [ -d "$dir" ] || continue
    name=$(basename "$dir")
    machine=$(machine_name "$name")
    pid=$(cat "$dir/pid" 2>/dev/null || true)
    if [ -n "$pid" ]; then
      for _ in $(seq 1 50); do nspawn_pid_ok "$pid" "$machine" || break; sleep 0.2; done
    fi
    if leader_ok "$dir" || { [ -n "$pid" ] && nspawn_pid_ok "$pid" "$machine"; }; then
      echo "nspawn-hosts: $machine did not power off: killing its init; console ends:" >&2
      tail -5 "$dir/console.log" >&2 || true
      kill_leader "$dir"
      if [ -n "$pid" ]; then
        for _ in $(seq 1 50); do nspawn_pid_ok "$pid" "$machine" || break; sleep 0.1; done
        nspawn_pid_ok "$pid" "$machine" && kill -KILL "$pid" 2>/dev/null
      fi
    fi
    if mountpoint -q "$dir/root"; then
      umount "$dir/root" 2>/dev/null || umount -l "$dir/root"
    fi
  done
  # Each upper dir holds an installed virtualenv: delete them side by side.
  for dir in "$state"/instances/*/; do
    [ -d "$dir" ] && ! mountpoint -q "$dir/root" && rm -rf "$dir" &
  done
  wait
  # SSH connection masters (ControlPersist) that Ansible and testinfra left to our hosts.
  local sock
  for sock in "$state"/cp/*; do
    [ -S "$sock" ] && ssh -o ControlPath="$sock" -O exit dummy >/dev/null 2>&1 || true
  done
  if [ -f "$state/bridge" ]; then
    local bridge
    bridge=$(cat "$state/bridge")
    if ip link show "$bridge" >/dev/null 2>&1; then ip link delete "$bridge" type bridge; fi
  fi
  if [ -f "$state/guard-route" ]; then
    ip route del $(cat "$state/guard-route") 2>/dev/null || true
  fi
  rm -rf "$state"
}

cmd_up() {
  local state=$1 rootfs=$2 bridge=$3 host_cidr=$4 pubkey=$5
  shift 5
  [ "$(id -u)" = 0 ] || die "needs root"
  command -v systemd-nspawn >/dev/null || die "systemd-nspawn missing (Debian systemd-container)"
  [ -f "$rootfs/.complete" ] || die "$rootfs is not a finished root filesystem (deploy/rootfs.sh)"
  [ -f "$pubkey" ] || die "no public key $pubkey"
  [ -e "$state" ] && die "$state exists: run '$0 down $state' first"
  local prefix=${host_cidr%.*}  # 10.213.77.1/24 -> 10.213.77
  case "$host_cidr" in */24) ;; *) die "HOST_CIDR must be a /24 (got $host_cidr)";; esac
  # The subnet must be unused here: no address in it, no route to it but the default one.
  if ip -o -4 addr show | grep -q " inet ${prefix//./\\.}\."; then
    die "an interface already has an address in ${prefix}.0/24"
  fi
  if ip -4 route show | grep -v '^default' | grep -q "^${prefix//./\\.}\."; then
    die "a route to ${prefix}.0/24 already exists"
  fi
  ip link show "$bridge" >/dev/null 2>&1 && die "interface $bridge already exists"

  mkdir -p "$state/instances" "$state/cp"
  # Guard: while the scenario exists, nothing sent to its subnet can leave by the default
  # route (the bridge's own route wins while the bridge is up; this one catches a packet
  # sent after the bridge is gone). Removed last by `down`.
  echo "unreachable ${prefix}.0/24 metric 4242" > "$state/guard-route"
  ip route add $(cat "$state/guard-route")
  echo "$bridge" > "$state/bridge"  # recorded before it exists: down removes it either way
  ip link add "$bridge" type bridge
  ip addr add "$host_cidr" dev "$bridge"
  ip link set "$bridge" up

  local hosts_file="$state/hosts"
  { echo "127.0.0.1 localhost"; echo "${host_cidr%/*} controller"; } > "$hosts_file"
  local spec name addr
  for spec in "$@"; do echo "${spec#*=} ${spec%%=*}" >> "$hosts_file"; done

  for spec in "$@"; do
    name=${spec%%=*}
    addr=${spec#*=}
    local dir="$state/instances/$name" machine
    machine=$(machine_name "$name")
    mkdir -p "$dir/upper" "$dir/work" "$dir/root"
    mount -t overlay overlay \
      -o "lowerdir=$rootfs,upperdir=$dir/upper,workdir=$dir/work" "$dir/root"
    local root="$dir/root"
    echo "$name" > "$root/etc/hostname"
    cp "$hosts_file" "$root/etc/hosts"
    : > "$root/etc/resolv.conf"  # no DNS at all: every name is in /etc/hosts
    mkdir -p "$root/etc/systemd/network"
    cat > "$root/etc/systemd/network/10-host0.network" <<EOF
[Match]
Name=host0

[Network]
Address=$addr/24
LinkLocalAddressing=no
IPv6AcceptRA=no
EOF
    install -m 600 "$pubkey" "$root/root/.ssh/authorized_keys"
    # At normal CPU priority whatever the caller's (make test runs Molecule's controller
    # niced): the hosts' services are what the scenario measures.
    setsid nice -n "$(( -$(nice) ))" systemd-nspawn -b -D "$root" -M "$machine" \
      --register=no --keep-unit \
      --console=passive --link-journal=no --resolv-conf=off --timezone=off \
      --network-bridge="$bridge" < /dev/null > "$dir/console.log" 2>&1 &
    echo $! > "$dir/pid"
  done

  # Record each instance's init (nspawn's child) with its PID namespace, for `down`.
  local pid leader
  for spec in "$@"; do
    name=${spec%%=*}
    pid=$(cat "$state/instances/$name/pid")
    leader=""
    for _ in $(seq 1 100); do
      leader=$(ps -o pid= --ppid "$pid" | head -1 | tr -d ' ')
      # nspawn's first child only sets the namespaces up; the init is the one in a new
      # PID namespace.
      if [ -n "$leader" ] && [ "$(readlink "/proc/$leader/ns/pid" 2>/dev/null)" != \
           "$(readlink /proc/self/ns/pid)" ]; then break; fi
      leader=""
      sleep 0.05
    done
    [ -n "$leader" ] || die "instance $name: no init process under systemd-nspawn $pid"
    echo "$leader $(readlink "/proc/$leader/ns/pid")" > "$state/instances/$name/leader"
  done

  # Ready when sshd answers on every instance.
  local deadline=$((SECONDS + 90))
  for spec in "$@"; do
    name=${spec%%=*}
    addr=${spec#*=}
    until timeout 1 bash -c "exec 3<>/dev/tcp/$addr/22" 2>/dev/null; do
      if ! nspawn_pid_ok "$(cat "$state/instances/$name/pid")" "$(machine_name "$name")"; then
        tail -20 "$state/instances/$name/console.log" >&2
        die "instance $name exited during boot"
      fi
      [ $SECONDS -lt $deadline ] || die "instance $name: no SSH on $addr:22 after 90 s"
      sleep 0.2
    done
  done
  echo "up: $* on $bridge ($host_cidr)"
}

case "${1:-}" in
  up) shift; [ $# -ge 6 ] || die "usage: $0 up STATE ROOTFS BRIDGE HOST_CIDR PUBKEY NAME=ADDR..."
      cmd_up "$@" ;;
  down) shift; [ $# -eq 1 ] || die "usage: $0 down STATE"; cmd_down "$1" ;;
  *) die "usage: $0 up STATE ROOTFS BRIDGE HOST_CIDR PUBKEY NAME=ADDR... | down STATE" ;;
esac
