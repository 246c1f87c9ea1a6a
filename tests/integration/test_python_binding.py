"""The Python binding (client/python/ckpt.py) over libckpt.so, with real
PyTorch checkpoints.

* Steps are stored with `ckptctl put` ($CKPTCTL), then listed, found and
  restored through the binding; restored bytes are compared with the
  originals and torch.load()ed.
* Errors raise CkptError with the right code and a message.
* commit / wait_durable against a real ckptfs mount ($CKPTFS): two ranks
  commit a step; it is durable, and consistent only once both committed.
* Steps above 2^53 (no double holds them): ckptctl and libckpt commit,
  wait for and report the same step, through a real mount, beside a
  neighbour step that a double would confuse it with.

Environment: CKPTCTL, CKPTFS (binaries), CKPT_LIBRARY (libckpt.so). Run by
ctest with Debian's python3 (torch). Exits non-zero on any failure; a
missing tool or FUSE fails too, never skips.
"""
import json
import os
import shutil
import subprocess
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "client", "python"))

import ckpt  # noqa: E402
import mountlib  # noqa: E402

CKPTCTL = os.environ.get("CKPTCTL")
CKPTFS = os.environ.get("CKPTFS")


def ckptctl(*args, state_dir):
    p = subprocess.run([CKPTCTL, "--state-dir", state_dir, *map(str, args)],
                       capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        raise AssertionError("ckptctl %s: exit %d\n%s%s" % (" ".join(map(str, args)),
                                                          p.returncode, p.stdout, p.stderr))
    return p.stdout


def expect_error(code, fn, *args, **kw):
    try:
        fn(*args, **kw)
    except ckpt.CkptError as e:
        assert e.code == code, "wanted %s, got %s: %s" % (code, e.name, e.message)
        assert e.message, "CkptError without a message"
        return e
    raise AssertionError("%s did not raise CkptError(%d)" % (fn.__name__, code))


def tree_bytes(root):
    """{relative path: bytes} of every file under root."""
    return mountlib.tree_map(root, mountlib.read_bytes)


def make_steps(tmp, url, job, state):
    """Steps 100, 200, 300 of job: a torch.save of a small model's state
    (changing per step) plus an optimizer-like blob and a text file."""
    import torch
    sources = {}
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 8))
    for step in (100, 200, 300):
        src = os.path.join(tmp, "src-%d" % step)
        os.makedirs(os.path.join(src, "extra"))
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.01 * step)
        torch.save({"step": step, "model": model.state_dict()}, os.path.join(src, "model.pt"))
        with open(os.path.join(src, "extra", "opt.bin"), "wb") as f:
            f.write(os.urandom(200000 + step))
        with open(os.path.join(src, "extra", "note.txt"), "w") as f:
            f.write("step %d\n" % step)
        ckptctl("--store", url, "--job", job, "put", "--step", step, src, state_dir=state)
        sources[step] = src
    return sources


def test_store_calls(tmp):
    url = "file://" + os.path.join(tmp, "store")
    state = os.path.join(tmp, "state")
    sources = make_steps(tmp, url, "train", state)
    ckptctl("--store", url, "--job", "other", "put", "--step", 1, sources[100], state_dir=state)

    assert ckpt.version() == "0.1.0" or ckpt.version().startswith("0."), ckpt.version()
    assert ckpt.list_jobs(url) == ["other", "train"], ckpt.list_jobs(url)

    steps = ckpt.list_steps(url, "train")
    assert [s.step for s in steps] == [100, 200, 300], steps
    for s in steps:
        src = tree_bytes(sources[s.step])
        assert s.consistent and s.complete and s.why == "", s
        assert s.files == len(src) == 3, s
        assert s.bytes == sum(len(b) for b in src.values()), s
        assert s.nodes == 1 and s.created_ns > 0, s
    assert ckpt.list_steps(url, "no-such-job") == []

    assert ckpt.latest_step(url, "train") == 300
    assert ckpt.latest_step(url, "no-such-job") is None

    # A named step.
    dest = os.path.join(tmp, "out-200")
    r = ckpt.restore(url, "train", dest, step=200)
    assert r.step == 200 and r.files == 3 and not r.fell_back and r.gets > 0, r
    assert tree_bytes(dest) == tree_bytes(sources[200])

    # The latest (step=None), with progress, through a Store reused.
    calls = []
    with ckpt.Store(url, state_dir=os.path.join(tmp, "state-b")) as st:
        dest = os.path.join(tmp, "out-latest")
        r = st.restore("train", dest, progress=lambda d, t: calls.append((d, t)), threads=2)
        assert r.step == 300 and r.files == 3, r
        assert tree_bytes(dest) == tree_bytes(sources[300])
        assert calls and calls[-1][0] == calls[-1][1] == r.bytes, calls[-3:]
        assert all(a[0] <= b[0] for a, b in zip(calls, calls[1:])), "progress went backwards"

        v = st.verify("train", 100)
        assert v.files == 3 and v.bad_files == 0 and v.chunks >= 3, v
        stats = st.stats("train")
        assert stats.steps == 3 and stats.consistent_steps == 3, stats
        assert stats.logical_bytes == sum(s.bytes for s in steps), stats
        assert 0 < stats.stored_bytes and stats.packs > 0, stats
        req = st.requests()
        assert req["get"] > 0 and req["put"] == 0, req

        # Errors: missing step / job, bad arguments.
        e = expect_error(ckpt.ENOTFOUND, st.restore, "train", os.path.join(tmp, "x"), step=250)
        assert "250" in e.message, e.message
        expect_error(ckpt.ENOTFOUND, st.restore, "no-such-job", os.path.join(tmp, "x"), step=1)
        expect_error(ckpt.ENOTFOUND, st.verify, "train", 250)
        expect_error(ckpt.EINVAL, st.latest_step, "")
        expect_error(ckpt.EINVAL, st.latest_step, "../escape")
        expect_error(ckpt.EINVAL, st.restore, "train", dest, step=-1)
        expect_error(ckpt.EINVAL, st.restore, "train", dest, step=100, rank=-3)
        assert not os.path.exists(os.path.join(tmp, "x", "model.pt"))
    expect_error(ckpt.EINVAL, st.list_steps, "train")  # closed
    expect_error(ckpt.EINVAL, ckpt.Store, "ftp://host/x")
    expect_error(ckpt.EINVAL, ckpt.latest_step, "file://relative", "train")

    # What a training script does after preemption: resume from the latest.
    import torch
    dest = os.path.join(tmp, "resume")
    step = ckpt.latest_step(url, "train")
    ckpt.restore(url, "train", dest, step=step)
    state = torch.load(os.path.join(dest, "model.pt"))
    want = torch.load(os.path.join(sources[300], "model.pt"))
    assert state["step"] == 300
    for k, t in want["model"].items():
        assert torch.equal(state["model"][k], t), k


def test_library_lookup(tmp):
    path = ckpt.library_path()
    assert os.path.exists(path), path
    # An explicit $CKPT_LIBRARY that does not exist is an error, not a fallback.
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import ckpt\n"
            "try:\n    ckpt.version()\nexcept OSError as e:\n    print('ERR', e)\n")
    p = subprocess.run([sys.executable, "-c", code, os.path.dirname(ckpt.__file__)],
                       capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, CKPT_LIBRARY=os.path.join(tmp, "nope.so")))
    assert p.stdout.startswith("ERR") and "nope.so" in p.stdout, (p.stdout, p.stderr)


def test_mount_commit_wait(tmp):
    """commit + wait_durable through a real ckptfs mount: a step written
    through the mount by "two ranks" of one node, committed by both."""
    assert CKPTFS, "set CKPTFS to the ckptfs binary"
    why = mountlib.fuse_usable()
    assert why is None, "FUSE not usable: %s" % why
    store = os.path.join(tmp, "mstore")
    url = "file://" + store
    mnt = os.path.join(tmp, "mnt")

    # Not a mount: no .ckptfs.
    os.makedirs(os.path.join(tmp, "plain"))
    expect_error(ckpt.ENOTFOUND, ckpt.commit, os.path.join(tmp, "plain"), "job", 1, 0, 1)
    expect_error(ckpt.ENOTFOUND, ckpt.wait_durable, os.path.join(tmp, "plain"), "job", 1, 0)
    expect_error(ckpt.ENOTFOUND, ckpt.drain, os.path.join(tmp, "plain"))

    with mountlib.Mount(mnt, store=url, staging=os.path.join(tmp, "staging"), node="n1",
                        binary=CKPTFS) as m:
        job = os.path.join(m.path, "job")
        os.mkdir(job)
        step_dir = os.path.join(job, "step-000010")
        os.mkdir(step_dir)
        shards = {}
        for rank in (0, 1):
            data = os.urandom(300000 + rank)
            shards["shard-r%d.bin" % rank] = data
            with open(os.path.join(step_dir, "shard-r%d.bin" % rank), "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())

        # Bad commits are refused with a clear error.
        expect_error(ckpt.EINVAL, ckpt.commit, m.path, "job", 10, 2, 2)
        e = expect_error(ckpt.ENOTFOUND, ckpt.commit, m.path, "no-such-job", 10, 0, 2)
        assert "no-such-job" in e.message or "refused" in e.message, e.message

        # Rank 0 of 2 commits: its part becomes durable, the step is not
        # consistent (rank 1 missing), so latest has nothing.
        ckpt.commit(m.path, "job", 10, 0, 2)
        ckpt.wait_durable(m.path, "job", 10, timeout=120)
        deadline = time.monotonic() + 10
        while True:
            steps = ckpt.list_steps(url, "job")
            if steps or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert [s.step for s in steps] == [10], steps
        assert not steps[0].consistent and steps[0].why, steps
        assert ckpt.latest_step(url, "job") is None

        # Rank 1 commits (as torchrun would tell it: RANK / WORLD_SIZE).
        os.environ.update(RANK="1", WORLD_SIZE="2")
        try:
            ckpt.commit(m.path, "job", 10)
        finally:
            del os.environ["RANK"], os.environ["WORLD_SIZE"]
        ckpt.wait_durable(m.path, "job", 10, timeout=120)
        deadline = time.monotonic() + 60
        while ckpt.latest_step(url, "job") != 10:
            assert time.monotonic() < deadline, ckpt.list_steps(url, "job")
            time.sleep(0.2)
        s = ckpt.list_steps(url, "job")[0]
        assert s.consistent and s.why == "" and s.files == 2, s

        # A step that never comes: a bounded wait.
        t0 = time.monotonic()
        e = expect_error(ckpt.ETIMEDOUT, ckpt.wait_durable, m.path, "job", 11, timeout=0.5)
        assert time.monotonic() - t0 < 5, "wait_durable overran its timeout"
        assert "11" in e.message, e.message

        # A preemption notice through the binding: the mount says it drains.
        assert not mountlib.read_status(m.path)["draining"]
        ckpt.drain(m.path)
        assert mountlib.read_status(m.path)["draining"]

    dest = os.path.join(tmp, "mrestore")
    r = ckpt.restore(url, "job", dest)
    assert r.step == 10 and r.files == 2, r
    assert tree_bytes(dest) == {os.path.join("step-000010", k): v for k, v in shards.items()}


TWO53 = 1 << 53  # 9007199254740992: the first integer a double cannot tell from its successor


def test_steps_above_2_53(tmp):
    """ckptctl and libckpt agree on step numbers above 2^53, through a real
    mount. Step 2^53 is still being written (a file open) when step 2^53+1 is
    committed and durable, and the status file lists 2^53 first: a reader that
    compares steps as doubles takes one for the other (ckptctl did: its wait
    never ended, its status printed 2^53 twice)."""
    assert CKPTFS, "set CKPTFS to the ckptfs binary"
    store = os.path.join(tmp, "store")
    url = "file://" + store
    state = os.path.join(tmp, "state")
    big = TWO53 + 1

    def ctl(*args):
        return subprocess.run([CKPTCTL, "--state-dir", state, "--job", "job", *map(str, args)],
                              capture_output=True, text=True, timeout=120)

    with mountlib.Mount(os.path.join(tmp, "mnt"), store=url, staging=os.path.join(tmp, "staging"),
                        node="n1", binary=CKPTFS) as m:
        os.makedirs(os.path.join(m.path, "job", "step-%d" % TWO53))
        os.makedirs(os.path.join(m.path, "job", "step-%d" % big))
        writing = open(os.path.join(m.path, "job", "step-%d" % TWO53, "part.bin"), "wb")
        try:
            writing.write(b"not done yet")
            with open(os.path.join(m.path, "job", "step-%d" % big, "part.bin"), "wb") as f:
                f.write(os.urandom(100000))
            # Rank 0 commits with ckptctl, rank 1 with libckpt.
            p = ctl("commit", "--mount", m.path, "--step", big, "--rank", 0, "--world-size", 2)
            assert p.returncode == 0, (p.returncode, p.stderr)
            ckpt.commit(m.path, "job", big, 1, 2)

            p = ctl("wait", "--mount", m.path, "--step", big, "--timeout", 60)
            assert p.returncode == 0, ("ckptctl wait", p.returncode, p.stdout, p.stderr)
            assert str(big) in p.stdout, p.stdout
            ckpt.wait_durable(m.path, "job", big, timeout=60)

            # The neighbour is not durable, for both.
            p = ctl("wait", "--mount", m.path, "--step", TWO53, "--timeout", 0.5)
            assert p.returncode == 6, ("ckptctl wait of 2^53", p.returncode, p.stderr)
            expect_error(ckpt.ETIMEDOUT, ckpt.wait_durable, m.path, "job", TWO53, timeout=0.5)

            # The status file and both of ckptctl's renderings of it keep the numbers exact.
            p = ctl("status", "--json", "--mount", m.path)
            assert p.returncode == 0, p.stderr
            states = {s["step"]: s["state"] for s in json.loads(p.stdout)["steps"]}
            assert states.get(big) == "durable" and states.get(TWO53) not in (None, "durable"), states
            p = ctl("status", "--mount", m.path)
            rows = [line.split() for line in p.stdout.splitlines() if line.startswith("job ")]
            assert ["job", str(big), "durable"] in [r[:3] for r in rows], p.stdout
            assert [str(TWO53)] == [r[1] for r in rows if r[1] != str(big)], p.stdout
        finally:
            writing.close()

    deadline = time.monotonic() + 60
    while ckpt.latest_step(url, "job") != big:
        assert time.monotonic() < deadline, ckpt.list_steps(url, "job")
        time.sleep(0.2)
    p = ctl("--store", url, "latest", "--json")
    assert p.returncode == 0 and json.loads(p.stdout)["step"] == big, (p.stdout, p.stderr)


def test_encrypted_store(tmp):
    """encryption_key_file opens an encrypted store (docs/ENCRYPTION.md):
    a step put with the key lists and restores bit-exact through the
    binding; without the key, or with another one, the store is refused
    (EINVAL naming the option or the key id, never a key)."""
    url = "file://" + os.path.join(tmp, "store")
    state = os.path.join(tmp, "state")
    key, other = os.path.join(tmp, "key"), os.path.join(tmp, "other")
    ckptctl("keygen", key, state_dir=state)
    ckptctl("keygen", other, state_dir=state)
    src = os.path.join(tmp, "src")
    os.makedirs(src)
    with open(os.path.join(src, "model.bin"), "wb") as f:
        f.write(os.urandom(1 << 20))
    ckptctl("--store", url, "--job", "job", "--encryption-key-file", key, "put", "--step", 7,
            src, state_dir=state)
    with ckpt.Store(url, state_dir=state, encryption_key_file=key) as st:
        assert [s.step for s in st.list_steps("job")] == [7]
        out = os.path.join(tmp, "out")
        st.restore("job", out, step=7)
        assert tree_bytes(out) == tree_bytes(src)
    e = expect_error(ckpt.EINVAL, ckpt.Store, url, state_dir=state)
    assert "encryption-key-file" in e.message, e.message
    with ckpt.Store(url, state_dir=state, encryption_key_file=other) as st:
        e = expect_error(ckpt.EINVAL, st.restore, "job", os.path.join(tmp, "out2"), step=7)
        assert "key id" in e.message and "ckptfs-key" not in e.message, e.message


def main():
    assert CKPTCTL, "set CKPTCTL to the ckptctl binary"
    failed = 0
    for t in (test_store_calls, test_library_lookup, test_mount_commit_wait,
              test_steps_above_2_53, test_encrypted_store):
        tmp = mountlib.tempdir("ckpt-pybind-")
        try:
            t(tmp)
            print("ok     %s" % t.__name__, flush=True)
            shutil.rmtree(tmp, ignore_errors=True)
        except Exception:  # noqa: BLE001 - report every test
            failed += 1
            traceback.print_exc()
            print("FAIL   %s (files kept in %s)" % (t.__name__, tmp), flush=True)
    print("%d failed" % failed)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
