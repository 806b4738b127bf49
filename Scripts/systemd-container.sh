#!/bin/sh
# Boots systemd as PID 1 of a throwaway container, runs a command in it, and throws it away: how the
# Debian package's maintainer scripts and the units are tested under a real service manager on a
# machine (or CI runner) whose PID 1 is not systemd.
#
#     sudo Scripts/systemd-container.sh SHARE_DIR COMMAND [ARG...]
#
# The container is this machine's root seen through a copy-on-write overlay on a tmpfs (nothing it
# writes reaches the disk), in its own pid, mount, UTS and cgroup namespaces. SHARE_DIR appears in it
# as /srv/keyhole-test (its /tmp is emptied at boot). COMMAND runs once systemd has finished booting
# basic.target, as root, with the container's root and namespaces; its exit status is the script's.
# Needs root, util-linux (unshare, nsenter, pivot_root), procps and systemd. Exit 70: no container.
#
# cgroups: the container's cgroup namespace starts at a cgroup of its own in the host's cgroup2
# hierarchy, mounted as the container's whole /sys/fs/cgroup, so systemd runs in unified mode with no
# controllers and never touches the host's v1 hierarchies (in legacy mode, a container systemd
# creates its cgroups at their roots). Nothing is left behind: the cgroup is removed at the end.
set -u
share=$1; shift
[ -d "$share" ] || { echo "no directory $share" >&2; exit 64; }
unified=/sys/fs/cgroup/unified
[ "$(stat -f -c %T /sys/fs/cgroup)" = cgroup2fs ] && unified=/sys/fs/cgroup
[ "$(stat -f -c %T "$unified" 2>/dev/null)" = cgroup2fs ] || { echo "no cgroup2 hierarchy" >&2; exit 70; }
group=$unified/keyhole-container-$$
work=$(mktemp -d /tmp/keyhole-container.XXXXXX)
init=
cleanup() {
    [ -n "$init" ] && kill -9 "$init" 2>/dev/null
    [ -n "${outer:-}" ] && wait "$outer" 2>/dev/null
    # Empty by now: the kernel kills every process of a pid namespace with its init.
    [ -d "$group" ] && find "$group" -depth -type d -exec rmdir {} \; 2>/dev/null
    [ ! -d "$group" ] || echo "systemd-container: cgroup $group left behind" >&2
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

cat >"$work/boot.sh" <<'BOOT'
set -e
work=$1 share=$2
umask 022
mkdir "$work/layers"
mount -t tmpfs none "$work/layers"
mkdir "$work/layers/upper" "$work/layers/work" "$work/layers/root"
mount -t overlay overlay -o "lowerdir=/,upperdir=$work/layers/upper,workdir=$work/layers/work" "$work/layers/root"
root=$work/layers/root
mount -t proc proc "$root/proc"
mount -t sysfs sysfs "$root/sys"
mount -t cgroup2 cgroup2 "$root/sys/fs/cgroup"
mount --rbind /dev "$root/dev"
mount -t tmpfs -o mode=755 tmpfs "$root/run"
mkdir -p "$root/srv/keyhole-test"
mount --bind "$share" "$root/srv/keyhole-test"
# A container image's policy-rc.d (Docker's "exit 101") forbids packages to start services: a real
# host has none.
rm -f "$root/usr/sbin/policy-rc.d"
cd "$root"
mkdir -p .host
# pivot_root, not chroot: a chrooted process may not create user namespaces (PrivateUsers=). Then
# every mount shared, as on a booted host: a unit's credentials (LoadCredential=) are mounted in a
# child's namespace and reach the service's only through propagation.
pivot_root . .host
exec env -i container=keyhole-test TERM=dumb /bin/sh -c \
    'umount -l /.host && rmdir /.host && mount --make-rshared / && exec /lib/systemd/systemd --unit=basic.target --log-target=journal --show-status=no'
BOOT

fail() { echo "systemd-container: $*" >&2; [ -s "$work/boot.log" ] && sed 's/^/  boot: /' "$work/boot.log" >&2; exit 70; }
mkdir "$group" || fail "cannot make the cgroup $group"
echo $$ >"$group/cgroup.procs" || fail "cannot enter the cgroup $group"
unshare --pid --fork --mount --propagation private --uts --cgroup /bin/sh "$work/boot.sh" "$work" "$share" 2>"$work/boot.log" &
outer=$!
# Back out of the container's cgroup: only the container belongs there.
echo $$ >"$unified/cgroup.procs"
i=0
while [ $i -lt 300 ]; do
    child=$(pgrep -P "$outer" | head -n 1)
    if [ -n "$child" ] && [ "$(cat "/proc/$child/comm" 2>/dev/null)" = systemd ]; then init=$child; break; fi
    kill -0 "$outer" 2>/dev/null || break
    sleep 0.1
    i=$((i + 1))
done
[ -n "$init" ] || fail "systemd did not start (unshare $(kill -0 "$outer" 2>/dev/null && echo running || echo ended))"
enter() { nsenter -t "$init" -m -p -u -C -r -w "$@"; }
# systemctl needs systemd's control socket, which appears a little after the exec (later on a cold
# cache): asked before, `is-system-running --wait` fails at once with "Failed to connect to bus".
i=0
until enter test -S /run/systemd/private; do
    [ $i -lt 300 ] || fail "systemd opened no control socket in 30 s"
    sleep 0.1
    i=$((i + 1))
done
state=$(enter timeout 60 systemctl is-system-running --wait 2>&1)
case $state in
    running|degraded) ;;
    *) fail "boot did not finish: $state" ;;
esac
enter "$@"
