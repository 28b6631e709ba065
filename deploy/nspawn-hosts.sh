#!/usr/bin/env bash
# Real systemd hosts for Molecule: systemd-nspawn instances booted from the cached root
# filesystem (deploy/rootfs.sh), one overlayfs upper dir each, reached by SSH over a host
# bridge that `up` creates and `down` removes (see docs/design/dependencies.md,
# "systemd-nspawn hosts for the deployment tests").
#
#   nspawn-hosts.sh up STATE ROOTFS BRIDGE HOST_CIDR PUBKEY NAME=ADDR...
#   nspawn-hosts.sh down STATE
#
# STATE is a directory recording what `up` made (bridge, guard route, each instance's
# nspawn PID and init, overlay mount). `down` undoes that, from any half-made state, and
# also whatever processes of this STATE a killed run left unrecorded; `up` runs `down`
# first. What is ours is decided by STATE's path, never by a bare name:
#  - a systemd-nspawn process whose arguments are `-D STATE/instances/NAME/root`
#    (its forked helpers carry the same arguments until they exec);
#  - a container init: the first process of a PID namespace whose root is the overlay
#    with `upperdir=STATE/instances/NAME/upper` (found even when its nspawn was killed
#    and it was reparented to PID 1, or `down` of an older run forgot it);
#  - the bridge and guard route recorded in STATE, and a veth `vb-txm-NAME` that is
#    still enslaved to that bridge after its container is gone.
# Each PID is checked again right before it is signalled. STATE is removed only when
# nothing of it is left, so a `down` that could not finish says why and can be rerun.
#
# Network: the bridge gets HOST_CIDR (a /24 that must be unused on this machine), the
# instances static addresses in it and no default route, so they can reach nothing but
# each other and the controller's bridge address. /etc/hosts is written in each instance
# (fact gathering otherwise stalls on DNS).
set -Eeuo pipefail
# A command that fails under set -e says which one, in functions too (-E).
trap 'echo "nspawn-hosts: line $LINENO: \"$BASH_COMMAND\" exited $?" >&2' ERR

die() { echo "nspawn-hosts: $*" >&2; exit 1; }
say() { echo "nspawn-hosts: $*" >&2; }

machine_name() { echo "txm-$1"; }  # short: nspawn's host-side veth is vb-<name>
veth_name() { echo "vb-$(machine_name "$1")"; }

# The helpers below only test and print; they are called in conditions, where bash
# ignores set -e, so every step that can fail returns explicitly. A process can exit
# between any two reads of /proc: each read that fails means "not (or no longer) ours".

SELF_PIDNS=$(readlink /proc/self/ns/pid)

nspawn_instance() {  # print NAME if PID $1 is a systemd-nspawn of STATE $2, else fail
  local pid=$1 state=$2 argv=() i
  mapfile -d '' argv 2>/dev/null < "/proc/$pid/cmdline" || return 1
  [ "${#argv[@]}" -gt 2 ] && [ "${argv[0]##*/}" = systemd-nspawn ] || return 1
  for ((i = 1; i < ${#argv[@]} - 1; i++)); do
    if [ "${argv[i]}" = -D ]; then
      case ${argv[i+1]} in
        "$state"/instances/*/root)
          local name=${argv[i+1]#"$state"/instances/}
          name=${name%/root}
          case $name in */*|'') return 1;; esac
          echo "$name"; return 0;;
      esac
      return 1
    fi
  done
  return 1
}

init_instance() {  # print NAME if PID $1 is the init of a container of STATE $2, else fail
  local pid=$1 state=$2 nspid line mp rest upper
  # The first process of a PID namespace below ours: NSpid ends in 1, with more than one.
  nspid=$(grep -s '^NSpid:' "/proc/$pid/status") || return 1
  set -- $nspid
  [ $# -ge 3 ] && [ "${!#}" = 1 ] || return 1
  # Its root is an instance's overlay, which names STATE in its upperdir option.
  while read -r _ _ _ _ mp rest; do
    [ "$mp" = / ] || continue
    case $rest in *" - overlay "*upperdir=*) ;; *) continue;; esac
    upper=${rest#*upperdir=}
    upper=${upper%%,*}
    case $upper in
      "$state"/instances/*/upper)
        local name=${upper#"$state"/instances/}
        name=${name%/upper}
        case $name in */*|'') continue;; esac
        echo "$name"; return 0;;
    esac
  done 2>/dev/null < "/proc/$pid/mountinfo"
  return 1
}

our_processes() {  # print "nspawn|init PID NAME" for every live process of STATE $1
  local state=$1 f pid name
  # Cheap prefilters first: the arguments hold STATE's path, the status a nested NSpid.
  for f in $(grep -lsaF -- "$state/instances/" /proc/[0-9]*/cmdline || true); do
    pid=${f#/proc/}; pid=${pid%/cmdline}
    name=$(nspawn_instance "$pid" "$state") && echo "nspawn $pid $name"
  done
  for f in $(grep -sE '^NSpid:.*[[:space:]]1$' /proc/[0-9]*/status | cut -d: -f1 || true); do
    pid=${f#/proc/}; pid=${pid%/status}
    name=$(init_instance "$pid" "$state") && echo "init $pid $name"
  done
  return 0
}

running() {  # PID $1 exists and is not a zombie
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  stat=${stat##*) }
  [ -n "$stat" ] && [ "${stat%% *}" != Z ]
}

signal_ours() {  # $1 signal, $2 kind, $3 PID, $4 STATE, $5 NAME: only if still that process
  local sig=$1 kind=$2 pid=$3 state=$4 name=$5 now
  now=$("${kind}_instance" "$pid" "$state") || return 0
  [ "$now" = "$name" ] || return 0
  kill "-$sig" "$pid" 2>/dev/null || true
}

find_init() {  # print "PID PIDNS" of the init under systemd-nspawn $1, else fail
  local nspawn=$1 child ns
  # nspawn's first child only sets the namespaces up and exits; the init is the child
  # in a new PID namespace (nspawn is its subreaper).
  for child in $(pgrep -P "$nspawn" || true); do
    ns=$(readlink "/proc/$child/ns/pid" 2>/dev/null) || continue
    if [ -n "$ns" ] && [ "$ns" != "$SELF_PIDNS" ]; then echo "$child $ns"; return 0; fi
  done
  return 1
}

stop_processes() {  # end every process of STATE $1; fail if any is left
  local state=$1 kind pid name left deadline
  # Ask each nspawn to power its container off (nspawn forwards SIGTERM as a poweroff
  # request); a test instance being thrown away gets 10 s, then its init is killed:
  # killing an init ends every process of its PID namespace, which killing nspawn alone
  # does not (its init would be reparented to PID 1 and keep the veth).
  left=$(our_processes "$state")
  [ -n "$left" ] || return 0
  if grep -q '^nspawn ' <<< "$left"; then
    while read -r kind pid name; do
      if [ "$kind" = nspawn ]; then signal_ours TERM nspawn "$pid" "$state" "$name"; fi
    done <<< "$left"
    deadline=$((SECONDS + 10))
    while [ $SECONDS -lt $deadline ]; do
      left=$(our_processes "$state")
      [ -n "$left" ] || return 0
      sleep 0.2
    done
  fi
  # Inits first, then the nspawns (which exit by themselves once their init is gone),
  # again until none is left: an nspawn still starting may fork an init meanwhile.
  say "$(wc -l <<< "$left") processes of $state did not end on power-off: killing them"
  local round
  for round in $(seq 1 50); do
    left=$(our_processes "$state")
    [ -n "$left" ] || return 0
    while read -r kind pid name; do
      if [ "$kind" = init ]; then signal_ours KILL init "$pid" "$state" "$name"; fi
    done <<< "$left"
    if [ "$round" -gt 2 ]; then
      while read -r kind pid name; do
        if [ "$kind" = nspawn ]; then signal_ours KILL nspawn "$pid" "$state" "$name"; fi
      done <<< "$left"
    fi
    sleep 0.2
  done
  left=$(our_processes "$state")
  [ -z "$left" ] && return 0
  say "still running after SIGKILL: $(tr '\n' ';' <<< "$left")"
  return 1
}

remove_veth() {  # veth $1 of a container that is gone; $2 our bridge (may be empty)
  local veth=$1 bridge=$2 master
  # The kernel deletes a veth with the network namespace of its peer, a moment after
  # the namespace's last process.
  for _ in $(seq 1 50); do
    ip link show "$veth" >/dev/null 2>&1 || return 0
    sleep 0.2
  done
  master=$(ip -o link show "$veth" 2>/dev/null | grep -o ' master [^ ]*' | cut -d' ' -f3)
  if [ -n "$bridge" ] && [ "$master" = "$bridge" ]; then
    ip link delete "$veth" 2>/dev/null || true
    ip link show "$veth" >/dev/null 2>&1 || return 0
  fi
  say "$veth still exists (master ${master:-none}) with no process of this STATE behind it"
  return 1
}

cmd_down() {
  local state=$1 ok=0 dir name bridge=""
  if [ -f "$state/bridge" ]; then bridge=$(cat "$state/bridge"); fi
  # The instances: those recorded, and any whose processes are still running.
  local -A names=()
  for dir in "$state"/instances/*/; do
    [ -d "$dir" ] && names[$(basename "$dir")]=1
  done
  local kind pid
  while read -r kind pid name; do
    if [ -n "$name" ]; then names[$name]=1; fi
  done <<< "$(our_processes "$state")"

  if ! stop_processes "$state"; then
    # A container still running keeps its veth, overlay and network: nothing else goes.
    say "down: $state is kept: the processes above are left (run down again)"
    return 1
  fi
  for name in "${!names[@]}"; do
    dir="$state/instances/$name"
    remove_veth "$(veth_name "$name")" "$bridge" || ok=1
    while mountpoint -q "$dir/root" 2>/dev/null; do
      umount "$dir/root" 2>/dev/null || umount -l "$dir/root" || { ok=1; break; }
    done
  done
  # Each upper dir holds an installed virtualenv: delete them side by side.
  for name in "${!names[@]}"; do
    dir="$state/instances/$name"
    if [ -d "$dir" ] && ! mountpoint -q "$dir/root"; then rm -rf "$dir" & fi
  done
  wait
  # SSH connection masters (ControlPersist) that Ansible and testinfra left to our hosts.
  local sock
  for sock in "$state"/cp/*; do
    [ -S "$sock" ] && ssh -o ControlPath="$sock" -O exit dummy >/dev/null 2>&1 || true
  done
  if [ -n "$bridge" ] && ip link show "$bridge" >/dev/null 2>&1; then
    ip link delete "$bridge" type bridge || ok=1
  fi
  if [ -f "$state/guard-route" ]; then  # "unreachable PREFIX metric 4242"
    local route
    route=$(cat "$state/guard-route")
    ip route del $route 2>/dev/null || true
    if grep -qF "${route#unreachable }" <<< "$(ip -4 route show type unreachable)"; then
      say "the route '$route' is still there"; ok=1
    fi
  fi
  if [ "$ok" != 0 ]; then
    say "down: $state is kept: what is listed above is left (run down again)"
    return 1
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
  local prefix=${host_cidr%.*}  # 10.213.77.1/24 -> 10.213.77
  case "$host_cidr" in */24) ;; *) die "HOST_CIDR must be a /24 (got $host_cidr)";; esac
  local spec name addr
  for spec in "$@"; do
    name=${spec%%=*}
    case $name in ''|*/*|*[!A-Za-z0-9-]*) die "bad instance name '$name'";; esac
  done

  # Whatever an earlier run of this STATE left (recorded or not) goes first.
  cmd_down "$state" || die "could not remove what an earlier run of $state left"
  for spec in "$@"; do
    name=${spec%%=*}
    if ip link show "$(veth_name "$name")" >/dev/null 2>&1; then
      die "interface $(veth_name "$name") exists and no container of $state holds it"
    fi
  done
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
  # sent after the bridge is gone). Recorded before it exists: down removes it either way.
  echo "unreachable ${prefix}.0/24 metric 4242" > "$state/guard-route"
  ip route add $(cat "$state/guard-route")
  echo "$bridge" > "$state/bridge"
  ip link add "$bridge" type bridge
  ip addr add "$host_cidr" dev "$bridge"
  ip link set "$bridge" up

  local hosts_file="$state/hosts"
  { echo "127.0.0.1 localhost"; echo "${host_cidr%/*} controller"; } > "$hosts_file"
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
    cat > "$root/etc/systemd/network/10-host0.network" <<NET
[Match]
Name=host0

[Network]
Address=$addr/24
LinkLocalAddressing=no
IPv6AcceptRA=no
NET
    install -m 600 "$pubkey" "$root/root/.ssh/authorized_keys"
    # At normal CPU priority whatever the caller's (make test runs Molecule's controller
    # niced): the hosts' services are what the scenario measures.
    setsid nice -n "$(( -$(nice) ))" systemd-nspawn -b -D "$root" -M "$machine" \
      --register=no --keep-unit \
      --console=passive --link-journal=no --resolv-conf=off --timezone=off \
      --network-bridge="$bridge" < /dev/null > "$dir/console.log" 2>&1 &
    echo $! > "$dir/pid"
  done

  # Record each instance's init (nspawn's child in a new PID namespace) with its PID
  # namespace: the test reads the journals through it, and `down` checks it before
  # killing. nspawn may not have forked yet, or its first child may exit between two
  # reads: each miss is retried until nspawn is gone or 60 s have passed ($! is
  # nspawn once the exec chain above has run).
  local pid leader deadline
  for spec in "$@"; do
    name=${spec%%=*}
    dir="$state/instances/$name"
    pid=$(cat "$dir/pid")
    deadline=$((SECONDS + 60))
    until leader=$(find_init "$pid"); do
      if ! running "$pid"; then
        tail -20 "$dir/console.log" >&2 || true
        die "instance $name: systemd-nspawn $pid exited before starting its init"
      fi
      [ $SECONDS -lt $deadline ] || die "instance $name: no init under systemd-nspawn $pid"
      sleep 0.05
    done
    echo "$leader" > "$dir/leader"
  done

  # Ready when sshd answers on every instance.
  deadline=$((SECONDS + 90))
  for spec in "$@"; do
    name=${spec%%=*}
    addr=${spec#*=}
    until timeout 1 bash -c "exec 3<>/dev/tcp/$addr/22" 2>/dev/null; do
      if ! nspawn_instance "$(cat "$state/instances/$name/pid")" "$state" >/dev/null; then
        tail -20 "$state/instances/$name/console.log" >&2 || true
        die "instance $name exited during boot"
      fi
      [ $SECONDS -lt $deadline ] || die "instance $name: no SSH on $addr:22 after 90 s"
      sleep 0.2
    done
  done
  echo "up: $* on $bridge ($host_cidr)"
}

# STATE by its canonical absolute path: processes are recognised by that string.
state_path() {
  case $1 in /*) ;; *) die "STATE must be an absolute path (got $1)";; esac
  realpath -m -- "$1"
}

case "${1:-}" in
  up) shift; [ $# -ge 6 ] || die "usage: $0 up STATE ROOTFS BRIDGE HOST_CIDR PUBKEY NAME=ADDR..."
      state=$(state_path "$1"); shift; cmd_up "$state" "$@" ;;
  down) shift; [ $# -eq 1 ] || die "usage: $0 down STATE"; cmd_down "$(state_path "$1")" ;;
  *) die "usage: $0 up STATE ROOTFS BRIDGE HOST_CIDR PUBKEY NAME=ADDR... | down STATE" ;;
esac
