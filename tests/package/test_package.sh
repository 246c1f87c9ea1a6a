#!/usr/bin/env bash
# The Debian package, end to end on this machine (docs/PACKAGING.md): build the .deb
# with CPack, `apt-get install` it, mount a file:// store through an
# /etc/fstab line and through `mount -t fuse.ckptfs CONF MNT`, write a
# checkpoint with real PyTorch through the mount, restore it with the
# *installed* ckptctl and read it with the *installed* Python binding, check
# --version, the man pages and the systemd unit, then `apt-get remove` and
# check that only the configuration is left.
#
#   test_package.sh BUILD_DIR        (as root: it installs a package)
#
# Cleans up on any exit: unmounts, stops only the daemons it started (found
# by its own temp config paths), removes its fstab line, purges the package.
set -euo pipefail
build=$(cd "$1" && pwd)
python=/usr/bin/python3
[ "$(id -u)" = 0 ] || { echo "test_package: must run as root (apt-get install)" >&2; exit 1; }
for tool in apt-get dpkg-deb mount umount man systemd-analyze "$python" cpack; do
    command -v "$tool" >/dev/null || { echo "test_package: $tool is missing" >&2; exit 1; }
done

tmp=$(mktemp -d /tmp/ckptfs-pkgtest.XXXXXX)
chmod 755 "$tmp"
export DEBIAN_FRONTEND=noninteractive
fstab_marker="ckptfs-package-test $tmp"
passed=0
syslog_pid=""

ok() { passed=$((passed + 1)); echo "ok: $*"; }
fail() { echo "FAIL: $*" >&2; exit 1; }

# PIDs of the daemons this test started: their command line names one of
# this test's config files (unique temp paths).
our_daemons() {
    local p
    for p in /proc/[0-9]*; do
        { tr '\0' ' ' <"$p/cmdline"; } 2>/dev/null | grep -q -- "--config $tmp/" && echo "${p#/proc/}"
    done
    return 0
}

# Waits up to $1 s for our daemons to exit (they drain after the unmount).
wait_daemons() {
    local i
    for ((i = 0; i < $1 * 10; i++)); do
        [ -z "$(our_daemons)" ] && return 0
        sleep 0.1
    done
    return 1
}

cleanup() {
    local rc=$?
    set +e
    for m in "$tmp"/mnt-*; do
        mountpoint -q "$m" 2>/dev/null && { timeout 30 umount "$m" || umount -l "$m"; }
    done
    if ! wait_daemons 30; then
        for pid in $(our_daemons); do kill -KILL "$pid"; done
    fi
    sed -i "\\#$tmp#d" /etc/fstab
    if [ -n "$syslog_pid" ]; then
        kill "$syslog_pid"
        wait "$syslog_pid" 2>/dev/null
        rm -f /dev/log
    fi
    if dpkg-query -W -f='${Status}' ckptfs 2>/dev/null | grep -q "ok"; then
        apt-get purge -y -qq ckptfs >/dev/null 2>&1 || dpkg --purge ckptfs >/dev/null 2>&1
    fi
    rm -rf "$tmp"
    if [ "$rc" = 0 ]; then echo "test_package: $passed checks passed"; else
        echo "test_package: FAILED (exit $rc) after $passed checks" >&2; fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- build and install ----
if dpkg-query -W -f='${Status}' ckptfs 2>/dev/null | grep -q "ok"; then
    echo "test_package: purging a ckptfs package left installed" >&2
    apt-get purge -y -qq ckptfs >/dev/null
fi
rm -f "$build"/ckptfs_*.deb
cmake --build "$build" --target package >"$tmp/cpack.log" 2>&1 || { cat "$tmp/cpack.log"; fail "cpack"; }
debs=("$build"/ckptfs_*.deb)
[ -f "${debs[0]}" ] && [ ${#debs[@]} = 1 ] || fail "expected one ckptfs_*.deb in $build"
deb=${debs[0]}
ok "built $(basename "$deb")"
dpkg-deb -f "$deb" Depends | grep -q "fuse3" && dpkg-deb -f "$deb" Depends | grep -q "python3" &&
    dpkg-deb -f "$deb" Depends | grep -q "libfuse3-3" || fail "Depends: $(dpkg-deb -f "$deb" Depends)"
ok "depends: $(dpkg-deb -f "$deb" Depends)"

apt-get install -y -qq "$deb" >"$tmp/apt.log" 2>&1 || { cat "$tmp/apt.log"; fail "apt-get install"; }
ok "apt-get install"
for f in /usr/bin/ckptfs /usr/bin/ckptctl /sbin/mount.fuse.ckptfs /lib/systemd/system/ckptfs@.service \
         /usr/include/ckpt/ckpt.h /usr/lib/python3/dist-packages/ckpt.py \
         /usr/share/man/man8/ckptfs.8 /usr/share/man/man1/ckptctl.1 /usr/share/man/man5/ckptfs.conf.5 \
         /etc/ckptfs/ckptfs.conf.example; do
    [ -e "$f" ] || fail "$f not installed"
done
ok "files installed"

# ---- --version, pkg-config, man, systemd unit ----
want=$(sed -n 's/^project(ckptfs VERSION \([0-9.]*\).*/\1/p' "$(dirname "$0")/../../CMakeLists.txt")
/usr/bin/ckptfs --version | grep -qx "ckptfs $want (libfuse .*)" || fail "ckptfs --version: $(/usr/bin/ckptfs --version)"
[ "$(/usr/bin/ckptctl --version)" = "ckptctl $want" ] || fail "ckptctl --version: $(/usr/bin/ckptctl --version)"
ok "--version says $want"
[ "$(pkg-config --modversion ckpt)" = "$want" ] || fail "pkg-config --modversion ckpt"
cat >"$tmp/use.c" <<'C'
#include <ckpt/ckpt.h>
#include <stdio.h>
int main(void) { printf("%s\n", ckpt_strerror(CKPT_OK)); return 0; }
C
# shellcheck disable=SC2046
cc -o "$tmp/use" "$tmp/use.c" $(pkg-config --cflags --libs ckpt) && "$tmp/use" >/dev/null ||
    fail "a program built with pkg-config ckpt"
ok "pkg-config ckpt: builds and runs against the installed library"
for page in "ckptctl" "8 ckptfs" "5 ckptfs.conf"; do
    # shellcheck disable=SC2086
    out=$(MANWIDTH=80 man --warnings $page 2>"$tmp/man.err") || { cat "$tmp/man.err"; fail "man $page"; }
    [ ! -s "$tmp/man.err" ] || { cat "$tmp/man.err"; fail "man $page warns"; }
    [ "$(printf '%s\n' "$out" | grep -c .)" -gt 20 ] || fail "man $page is nearly empty"
done
ok "man ckptctl, man 8 ckptfs, man 5 ckptfs.conf render without warnings"
# A template is verified through an instance; the config need not exist.
cp /lib/systemd/system/ckptfs@.service "$tmp/ckptfs@lint.service"
if ! systemd-analyze verify "$tmp/ckptfs@lint.service" >"$tmp/verify.log" 2>&1 ||
    grep -i "ckptfs@" "$tmp/verify.log"; then
    cat "$tmp/verify.log"; fail "systemd-analyze verify ckptfs@.service"
fi
grep -qx "ExecStart=/usr/bin/ckptfs --config /etc/ckptfs/%i.conf -f" /lib/systemd/system/ckptfs@.service ||
    fail "the unit's ExecStart"
ok "systemd-analyze verify ckptfs@.service"

# ---- syslog: the daemonised mounts log there ----
# This machine has no syslog daemon (no /dev/log): the test listens on
# /dev/log itself for the length of the test, one datagram per line of
# $tmp/syslog (a datagram holding a raw newline is flagged). With a real
# /dev/log (journald), journalctl is asked instead.
if [ -e /dev/log ]; then
    command -v journalctl >/dev/null || fail "/dev/log exists but there is no journalctl to read it"
    read_syslog() { journalctl -q -o short --identifier=ckptfs --since "-10 min" | sed 's/^[^:]*: //'; }
else
    "$python" - "$tmp/syslog" <<'PY' &
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind("/dev/log")
with open(sys.argv[1], "ab", buffering=0) as f:
    while True:
        d = s.recv(65536).rstrip(b"\n")
        f.write((b"RAW-NEWLINE " if b"\n" in d else b"") + d + b"\n")
PY
    syslog_pid=$!
    for _ in $(seq 100); do [ -S /dev/log ] && break; sleep 0.1; done
    [ -S /dev/log ] || fail "the /dev/log listener did not start"
    read_syslog() { cat "$tmp/syslog"; }
fi

# ---- mounts: fstab and mount -t ----
store=file://$tmp/store
mkdir -p "$tmp/mnt-fstab" "$tmp/mnt-type"
for node in a b; do # a: the fstab mount, b: the mount -t one
    printf 'store = %s\nstaging = %s\nnode = %s\ndrain = 30\n' "$store" "$tmp/staging-$node" "$node" \
        >"$tmp/$node.conf"
done
printf '# %s\n%s %s fuse.ckptfs defaults,_netdev 0 0\n' "$fstab_marker" "$tmp/a.conf" "$tmp/mnt-fstab" >>/etc/fstab
timeout 60 mount "$tmp/mnt-fstab" || fail "mount through the fstab line"
grep -q "^$tmp/a.conf $tmp/mnt-fstab fuse.ckptfs " /proc/mounts || fail "fstab mount not in /proc/mounts: $(grep ckptfs /proc/mounts)"
ok "mounted through /etc/fstab ($tmp/a.conf $tmp/mnt-fstab fuse.ckptfs defaults,_netdev)"
timeout 60 mount -t fuse.ckptfs "$tmp/b.conf" "$tmp/mnt-type" || fail "mount -t fuse.ckptfs"
grep -q "^$tmp/b.conf $tmp/mnt-type fuse.ckptfs " /proc/mounts || fail "mount -t not in /proc/mounts"
ok "mounted with mount -t fuse.ckptfs CONF MNT"

# ---- a checkpoint through each mount, with real PyTorch ----
export LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-pthread
save() { # MNT STEP SEED
    mkdir -p "$1/job"
    "$python" - "$1/job/ckpt_$(printf %06d "$2").pt" "$3" <<'PY'
import sys, torch
torch.manual_seed(int(sys.argv[2]))
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 64))
torch.save({"model": model.state_dict(), "step": int(sys.argv[2])}, sys.argv[1])
PY
}
save "$tmp/mnt-fstab" 10 10
timeout 120 /usr/bin/ckptctl --job job wait --mount "$tmp/mnt-fstab" --step 10 --timeout 100 ||
    fail "step 10 durable through the fstab mount"
ok "torch.save through the fstab mount, step 10 durable"
save "$tmp/mnt-type" 20 20
timeout 120 /usr/bin/ckptctl --job job wait --mount "$tmp/mnt-type" --step 20 --timeout 100 ||
    fail "step 20 durable through the mount -t mount"
ok "torch.save through the mount -t mount, step 20 durable"

# ---- unmount (the daemons drain and exit) ----
timeout 60 umount "$tmp/mnt-fstab" || fail "umount the fstab mount"
timeout 60 umount "$tmp/mnt-type" || fail "umount the mount -t mount"
wait_daemons 60 || fail "the daemons did not exit after umount: $(our_daemons)"
ok "unmounted; the daemons exited"
# daemon.info is priority 30; glibc writes "<30>Mon DD HH:MM:SS ckptfs[PID]: ...".
read_syslog >"$tmp/syslog.seen"
grep -q "ckptfs\[[0-9]*\]: $store mounted on $tmp/mnt-fstab (staging $tmp/staging-a)" "$tmp/syslog.seen" ||
    { cat "$tmp/syslog.seen"; fail "the daemonised fstab mount did not log to syslog"; }
grep -q "ckptfs\[[0-9]*\]: step 20 of job is durable" "$tmp/syslog.seen" ||
    { cat "$tmp/syslog.seen"; fail "no 'step 20 ... durable' in syslog"; }
if [ -n "$syslog_pid" ]; then
    grep -q "^<30>.*ckptfs\[" "$tmp/syslog.seen" || fail "syslog lines are not daemon.info"
    grep -q "^RAW-NEWLINE" "$tmp/syslog.seen" && fail "a syslog message holds a raw newline"
fi
ok "daemonised mounts log to syslog, one message per event ($(grep -c ckptfs "$tmp/syslog.seen") lines)"

# ---- restore with the installed ckptctl, read with the installed binding ----
/usr/bin/ckptctl --store "$store" --job job restore --step 10 --to "$tmp/restored" >/dev/null ||
    fail "ckptctl restore --step 10"
ok "installed ckptctl restored step 10"
(cd "$tmp" && env -u CKPT_LIBRARY -u PYTHONPATH "$python" - "$store" "$tmp" <<'PY') || fail "installed binding"
import sys, torch
import ckpt
assert ckpt.__file__ == "/usr/lib/python3/dist-packages/ckpt.py", ckpt.__file__
lib = ckpt.library_path()
assert lib.startswith(("/usr/lib/", "/lib/")) or lib == "libckpt.so.0", lib
store, tmp = sys.argv[1], sys.argv[2]
with ckpt.Store(store, state_dir=tmp + "/state") as s:
    steps = [st.step for st in s.list_steps("job")]
    assert steps == [10, 20], steps
    assert s.latest_step("job") == 20
    s.restore("job", tmp + "/restored20", step=20)
for step in (10, 20):
    path = "%s/restored%s/ckpt_%06d.pt" % (tmp, "" if step == 10 else "20", step)
    got = torch.load(path)
    torch.manual_seed(step)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 64))
    want = model.state_dict()
    assert got["step"] == step
    assert all(torch.equal(got["model"][k], want[k]) for k in want), step
print("binding", ckpt.version(), "from", ckpt.__file__, "library", lib)
PY
ok "installed Python binding: steps [10, 20], both restored tensors equal what torch.save wrote"

# ---- remove: only the configuration stays ----
dpkg-deb -c "$deb" | awk '{print substr($6, 2)}' | grep -v '/$' >"$tmp/files"
apt-get remove -y -qq ckptfs >"$tmp/apt.log" 2>&1 || { cat "$tmp/apt.log"; fail "apt-get remove"; }
status=$(dpkg-query -W -f='${Status}' ckptfs)
[ "$status" = "deinstall ok config-files" ] || fail "status after remove: $status"
left=()
while read -r f; do
    [ -e "$f" ] || [ -L "$f" ] && left+=("$f")
done <"$tmp/files"
[ "${left[*]}" = "/etc/ckptfs/ckptfs.conf.example" ] || fail "left after remove: ${left[*]}"
ls /usr/lib/python3/dist-packages/__pycache__/ckpt.* >/dev/null 2>&1 && fail "byte code of ckpt.py left behind"
ok "apt-get remove: only /etc/ckptfs/ckptfs.conf.example (a conffile) is left"
apt-get purge -y -qq ckptfs >/dev/null 2>&1 || fail "apt-get purge"
[ ! -e /etc/ckptfs/ckptfs.conf.example ] || fail "purge left the conffile"
ok "apt-get purge removes the configuration too"
