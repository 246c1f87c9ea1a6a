#!/usr/bin/env python3
"""resume_probe.py - where a new node's mount spends its time before the first
byte (docs/BENCHMARKS.md, "RGW's fixed mount cost").

    resume_probe.py BUILD RGW_ENV WORKDIR PREFETCH(0|1) PREFIX

Saves a 16 MiB random file through one ckptfs mount (node-a) into
s3://ckpt-test/PREFIX of the RGW that RGW_ENV describes (tests/s3/rgw.sh
start writes it), through the counting proxy (tests/s3/faultproxy.py
--request-log), then mounts a new node (node-b, empty staging) and reads the
file back, checking its bytes. Prints the phases (spawn -> mounted -> open ->
first byte -> done) and every request of the new node's mount, times relative
to its spawn. Cleans up what it started by PID; times out rather than hangs.
"""
import os, subprocess, sys, time, signal
B, RGW_ENV, W, PREFETCH, prefix = sys.argv[1:6]
prefetch = PREFETCH == "1"
env = dict(os.environ)
for line in open(RGW_ENV):
    k, _, v = line.strip().partition("=")
    env[k] = v.strip("'\"")
env["AWS_ACCESS_KEY_ID"] = env["RGW_ACCESS_KEY"]; env["AWS_SECRET_ACCESS_KEY"] = env["RGW_SECRET_KEY"]
port = env["RGW_ENDPOINT"].rsplit(":", 1)[1]
os.makedirs(W, exist_ok=True)
log = os.path.join(W, "requests.log")
pf = os.path.join(W, "port")
for f in (log, pf):
    if os.path.exists(f): os.unlink(f)
proxy = subprocess.Popen([sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "s3", "faultproxy.py"), "--target-port", port,
                          "--port-file", pf, "--request-log", log, "--owner-pid", str(os.getpid())])
while not os.path.exists(pf): time.sleep(0.05)
ep = "http://127.0.0.1:" + open(pf).read().strip()
store = "s3://ckpt-test/" + prefix
daemons = []  # (process, mountpoint) started and not yet unmounted


def mounted(m):
    return any(l.split()[4] == m for l in open("/proc/self/mountinfo"))
def mount(phase, node, extra):
    mnt = os.path.join(W, "mnt." + phase); st = os.path.join(W, "staging." + phase)
    os.makedirs(mnt, exist_ok=True); os.makedirs(st, exist_ok=True)
    t = time.monotonic()
    d = subprocess.Popen([B + "/fs/ckptfs", mnt, "--store", store, "--s3-endpoint", ep, "--staging", st,
                          "--node", node, "-f"] + extra, env=env, stdout=open(os.path.join(W, phase + ".log"), "w"), stderr=subprocess.STDOUT)
    daemons.append((d, mnt))
    while not mounted(mnt):
        assert d.poll() is None and time.monotonic() - t < 30
        time.sleep(0.01)
    return d, mnt, t
def umount(d, mnt):
    subprocess.run(["fusermount3", "-u", mnt], timeout=120)
    d.wait(timeout=120)
    daemons.remove((d, mnt))
try:
    d, mnt, _ = mount("save", "node-a", [])
    os.mkdir(os.path.join(mnt, "job"))
    data = os.urandom(16 << 20)
    with open(os.path.join(mnt, "job", "ckpt_000001.pt"), "wb") as f: f.write(data)
    time.sleep(3)
    umount(d, mnt)
    mark = time.monotonic()
    d, mnt, t0 = mount("resume", "node-b", ["--prefetch", "latest" if prefetch else "none"])
    t_up = time.monotonic()
    with open(os.path.join(mnt, "job", "ckpt_000001.pt"), "rb") as f:
        t_open = time.monotonic()
        first = f.read(1 << 16); t_first = time.monotonic()
        rest = f.read(); t_done = time.monotonic()
    assert first + rest == data
    print("spawn->mounted %.3f  mounted->open %.3f  open->first byte %.3f  ->done %.3f  total %.3f" % (
        t_up - t0, t_open - t_up, t_first - t_open, t_done - t_first, t_done - t0))
    umount(d, mnt)
    print("t0(spawn)=%.4f mounted=%.4f open=%.4f first=%.4f done=%.4f" % (t0, t_up, t_open, t_first, t_done))
    with open(log) as f:
        for l in f:
            a, b, m, p, s = l.split()
            if float(a) >= mark - 0.001:
                print("%+.3f %+.3f %.3f %s %s %s" % (float(a) - t0, float(b) - t0, float(b) - float(a), m, p[:110], s))
finally:
    for d, mnt in list(daemons):  # a failed probe: stop what it started, by PID
        subprocess.run(["fusermount3", "-u", "-z", mnt], timeout=30)
        d.kill()
        d.wait(timeout=30)
    proxy.send_signal(signal.SIGTERM); proxy.wait(timeout=10)
