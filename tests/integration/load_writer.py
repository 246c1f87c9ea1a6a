"""One writer process of the load test (test_load.py): writes STEPS steps of
one job into a ckptfs mount, each in a layout picked at random, and records
what was acknowledged.

    load_writer.py JOB_DIR RECORD SEED STEPS SIZE_CLASS USE_TORCH

* JOB_DIR: the job's directory in the mount; it must exist (the writer never
  creates it, so after a crash, with the dead mount detached, it cannot write
  into the bare mountpoint directory by mistake).
* RECORD: a JSON-lines file outside the mount. One line per step, written
  and fsynced only after every close() (and the DCP rename) of the step
  returned: {"step": N, "layout": L, "files": {relpath: sha256}, "bytes":
  B}; a step
  that hit an error: {"step": N, "layout": L, "error": "...", "files": the
  acknowledged ones, "intended": every file it meant to write or was
  writing, with the sha256 of its whole content}. The daemon may have
  made such a step whole anyway (killed after it committed the last close
  or rename, before the reply): then it must hold exactly "intended".
* SIZE_CLASS: "small" (CI: files up to 64 KiB) or "full" (up to 4 MiB).
* USE_TORCH: 1 to add torch.save layouts (imports torch: seconds, memory).

Layouts (docs/STEPS.md): a single-file step `ckpt-N.pt`; a plain step
directory `step-N/` with nested files and the `.ckpt-complete` marker (R1);
a DCP-like `step-N/__R_0.distcp` (each fsynced) then `.metadata.tmp`
renamed to `.metadata` (R1); an HF-like `checkpoint-N/pytorch_model.bin` +
`trainer_state.json` (R1). Some files are the same bytes every step (a frozen
part), so the daemons meet chunks GC has just marked or deleted.

After an error (the daemon was killed: ENOTCONN, or ENOENT once the dead
mount is detached) the writer waits for the mount to come back, then goes on
with the next step number. It exits 0 after STEPS recorded steps.
"""
import hashlib
import io
import json
import os
import random
import sys
import time

job_dir, record_path, seed, steps, size_class, use_torch = (
    sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5],
    sys.argv[6] == "1")
MAX_SIZE = 64 << 10 if size_class == "small" else 4 << 20
WAIT_FOR_MOUNT = 120  # s: a restart of the daemon takes ~1 s
rng = random.Random(seed)
torch = None
if use_torch:
    import torch  # noqa: F811 (Debian's python3-torch)
written = [0]  # bytes the current step wrote
intended = {}  # the current step's files as meant: {relpath: sha256}, set before each open
FROZEN = random.Random(seed ^ 0x5EED).randbytes(min(MAX_SIZE, 48 << 10))


def payload():
    return rng.randbytes(rng.randint(1, MAX_SIZE))


def write_file(rel, data, fsync=False):
    """Writes data to JOB_DIR/rel; returns its sha256 once close() returned.
    The file is in `intended` from before its open."""
    intended[rel] = hashlib.sha256(data).hexdigest()
    with open(os.path.join(job_dir, rel), "wb") as f:
        f.write(data)
        written[0] += len(data)
        if fsync:
            f.flush()
            os.fsync(f.fileno())
    return intended[rel]


def torch_bytes():
    """torch.save of 1-4 random tensors, as the bytes it writes (saved to
    memory first, so the hash is of what was written, not of what the
    mount reads back)."""
    tensors = {"w%d" % i: torch.randn(rng.randint(1, max(1, MAX_SIZE // 64)), 16)
               for i in range(rng.randint(1, 4))}
    buf = io.BytesIO()
    torch.save(tensors, buf)
    return buf.getvalue()


def step_single(step, files):
    rel = "ckpt-%06d.pt" % step
    files[rel] = write_file(rel, torch_bytes() if torch else payload())


def step_plain(step, files):
    d = "step-%06d" % step
    os.mkdir(os.path.join(job_dir, d))
    os.mkdir(os.path.join(job_dir, d, "model"))
    for i in range(rng.randint(1, 5)):
        rel = "%s/model/part-%d.bin" % (d, i)
        files[rel] = write_file(rel, payload())
    files[d + "/frozen.bin"] = write_file(d + "/frozen.bin", FROZEN)
    files[d + "/.ckpt-complete"] = write_file(d + "/.ckpt-complete", b"")


def step_dcp(step, files):
    d = "step-%06d" % step
    os.mkdir(os.path.join(job_dir, d))
    for r in range(rng.randint(1, 4)):
        rel = "%s/__%d_0.distcp" % (d, r)
        files[rel] = write_file(rel, FROZEN if r == 0 else payload(), fsync=True)
    meta = json.dumps({"step": step, "shards": sorted(files)}).encode()
    write_file(d + "/.metadata.tmp", meta, fsync=True)
    intended[d + "/.metadata"] = intended.pop(d + "/.metadata.tmp")
    os.rename(os.path.join(job_dir, d, ".metadata.tmp"), os.path.join(job_dir, d, ".metadata"))
    files[d + "/.metadata"] = hashlib.sha256(meta).hexdigest()


def step_hf(step, files):
    d = "checkpoint-%d" % step
    os.mkdir(os.path.join(job_dir, d))
    files[d + "/pytorch_model.bin"] = write_file(d + "/pytorch_model.bin",
                                                 torch_bytes() if torch else payload())
    files[d + "/trainer_state.json"] = write_file(
        d + "/trainer_state.json", json.dumps({"global_step": step}).encode())


LAYOUTS = {"single": step_single, "plain": step_plain, "dcp": step_dcp, "hf": step_hf}


def wait_for_mount():
    deadline = time.monotonic() + WAIT_FOR_MOUNT
    mount = os.path.dirname(job_dir.rstrip("/"))
    while not (os.path.exists(os.path.join(mount, ".ckptfs", "status"))
               and os.path.isdir(job_dir)):
        if time.monotonic() > deadline:
            sys.exit("load_writer: the mount did not come back within %ss" % WAIT_FOR_MOUNT)
        time.sleep(0.2)


with open(record_path, "a") as record:
    step = 0
    for _ in range(steps):
        step += 1
        layout = rng.choice(sorted(LAYOUTS))
        files = {}
        intended.clear()
        written[0] = 0
        try:
            LAYOUTS[layout](step, files)
            line = {"step": step, "layout": layout, "files": files, "bytes": written[0]}
        except (OSError, RuntimeError) as e:  # torch raises RuntimeError for I/O
            line = {"step": step, "layout": layout, "error": str(e), "files": files,
                    "intended": dict(intended)}
        record.write(json.dumps(line) + "\n")
        record.flush()
        os.fsync(record.fileno())
        if "error" in line:
            wait_for_mount()
