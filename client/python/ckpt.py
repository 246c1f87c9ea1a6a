"""ckpt — Python binding of libckpt, the ckptfs client library (ctypes; no
compiled extension, no build step).

Resume a training run from the latest consistent checkpoint after a
preemption::

    import ckpt
    step = ckpt.latest_step("file:///srv/ckpt", "llama-ft")   # None: start fresh
    if step is not None:
        ckpt.restore("file:///srv/ckpt", "llama-ft", "/tmp/resume", step=step)

On a node writing through a ckptfs mount, each rank declares its part of a
step done, and whoever needs it waits until the step is in the object store::

    ckpt.commit("/mnt/ckpt", "llama-ft", step, rank, world_size)
    ckpt.wait_durable("/mnt/ckpt", "llama-ft", step, timeout=600)

Every failure raises CkptError (``.code``, ``.name``, ``.message``); the codes
are those of ckpt.h (CKPT_ENOTFOUND, ...), available here as module constants.

The library is found, in order: $CKPT_LIBRARY (a path); libckpt.so next to
this module; ../../build/client/libckpt.so relative to this file (a source
checkout built in ./build); the system (ctypes.util.find_library("ckpt"),
then "libckpt.so.0").

Threads: a Store serialises its own calls with a lock, so one Store may be
shared between Python threads (calls then run one at a time); the
module-level functions are safe from any thread.
"""
import ctypes
import ctypes.util
import dataclasses
import os
import threading

__all__ = [
    "CkptError", "Store", "Step", "RestoreResult", "VerifyResult", "Stats",
    "latest_step", "list_steps", "list_jobs", "restore", "verify", "commit", "wait_durable", "drain",
    "version", "library_path",
    "OK", "ENOTFOUND", "EINVAL", "EIO", "ECORRUPT", "ESTORE", "ENOMEM", "ETIMEDOUT",
    "EEXIST", "ENOSPC", "EUNSUPPORTED",
]

# Codes of ckpt.h's enum ckpt_code (numbers never reused).
OK = 0
ENOTFOUND = 1
EINVAL = 2
EIO = 3
ECORRUPT = 4
ESTORE = 5
ENOMEM = 6
ETIMEDOUT = 7
EEXIST = 8
ENOSPC = 9
EUNSUPPORTED = 10
_CODE_NAMES = {v: "CKPT_" + k for k, v in globals().items()
               if k.isupper() and isinstance(v, int) and k != "OK"}
_CODE_NAMES[OK] = "CKPT_OK"

_SUPPORTED_MAJOR = 0  # the libckpt major version this module's structs mirror


class CkptError(Exception):
    """A libckpt call failed.

    Attributes: code (int, one of the module's E* constants), name
    ("CKPT_ENOTFOUND"), message (the library's detail: which file, key or
    step, and why)."""

    def __init__(self, code, message):
        self.code = code
        self.name = _CODE_NAMES.get(code, "CKPT_E%d" % code)
        self.message = message
        super().__init__("%s: %s" % (self.name, message))


# ------------------------------------------------------------ the C structs

class _Options(ctypes.Structure):
    _fields_ = [("state_dir", ctypes.c_char_p), ("node", ctypes.c_char_p),
                ("warn", ctypes.c_void_p), ("warn_arg", ctypes.c_void_p),
                ("s3_endpoint", ctypes.c_char_p), ("s3_signature", ctypes.c_char_p),
                ("s3_region", ctypes.c_char_p), ("s3_addressing", ctypes.c_char_p),
                ("s3_ca_file", ctypes.c_char_p), ("encryption_key_file", ctypes.c_char_p)]


class _Step(ctypes.Structure):
    _fields_ = [("step", ctypes.c_uint64), ("created_ns", ctypes.c_int64),
                ("files", ctypes.c_uint64), ("bytes", ctypes.c_uint64),
                ("nodes", ctypes.c_uint64), ("consistent", ctypes.c_int),
                ("complete", ctypes.c_int), ("world_size", ctypes.c_uint32),
                ("ranks", ctypes.c_uint32), ("why", ctypes.c_char * 160)]


_PROGRESS = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint64)


class _RestoreOptions(ctypes.Structure):
    _fields_ = [("rank", ctypes.c_int), ("latest", ctypes.c_int),
                ("no_fallback", ctypes.c_int), ("threads", ctypes.c_uint),
                ("progress", _PROGRESS), ("progress_arg", ctypes.c_void_p)]


class _RestoreResult(ctypes.Structure):
    _fields_ = [("step", ctypes.c_uint64), ("files", ctypes.c_uint64),
                ("bytes", ctypes.c_uint64), ("gets", ctypes.c_uint64),
                ("fell_back", ctypes.c_int), ("failed_step", ctypes.c_uint64),
                ("failure", ctypes.c_char * 256)]


class _VerifyResult(ctypes.Structure):
    _fields_ = [("files", ctypes.c_uint64), ("chunks", ctypes.c_uint64),
                ("bytes", ctypes.c_uint64), ("bad_files", ctypes.c_uint64)]


class _Stats(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint64) for n in (
        "steps", "consistent_steps", "logical_bytes", "stored_bytes", "packs", "manifests",
        "part_records")]


class _Requests(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint64) for n in ("put", "get", "stat", "list", "del_")]


# --------------------------------------------------------- what we return

@dataclasses.dataclass(frozen=True)
class Step:
    """One step as readers see it (ckpt.h struct ckpt_step).

    consistent: complete on every rank and durable (restorable); complete:
    some node saw it complete; why: "" when consistent, else why not
    ("missing ranks 2,3"); world_size 0 means unknown."""
    step: int
    consistent: bool
    complete: bool
    files: int
    bytes: int
    nodes: int
    world_size: int
    ranks: int
    why: str
    created_ns: int


@dataclasses.dataclass(frozen=True)
class RestoreResult:
    """What a restore did. fell_back: the latest step failed verification
    and the older `step` was restored instead (failed_step, failure say
    which and why)."""
    step: int
    files: int
    bytes: int
    gets: int
    fell_back: bool
    failed_step: int
    failure: str


@dataclasses.dataclass(frozen=True)
class VerifyResult:
    """What a verification read (bad_files is 0 on success)."""
    files: int
    chunks: int
    bytes: int
    bad_files: int


@dataclasses.dataclass(frozen=True)
class Stats:
    """Space accounting of one job (logical_bytes / stored_bytes is the
    dedup and compression ratio)."""
    steps: int
    consistent_steps: int
    logical_bytes: int
    stored_bytes: int
    packs: int
    manifests: int
    part_records: int


# ------------------------------------------------------------ the library

_lib = None
_lib_path = None
_lib_lock = threading.Lock()


def _candidates():
    env = os.environ.get("CKPT_LIBRARY")
    if env:
        yield env
        return  # an explicit choice is not second-guessed
    here = os.path.dirname(os.path.abspath(__file__))
    yield os.path.join(here, "libckpt.so")
    yield os.path.normpath(os.path.join(here, "..", "..", "build", "client", "libckpt.so"))
    found = ctypes.util.find_library("ckpt")
    if found:
        yield found
    yield "libckpt.so.0"


def _load():
    global _lib, _lib_path
    with _lib_lock:
        if _lib is not None:
            return _lib
        tried = []
        for path in _candidates():
            if os.sep in path and not os.path.exists(path):
                tried.append("%s (missing)" % path)
                continue
            try:
                lib = ctypes.CDLL(path)
            except OSError as e:
                tried.append("%s (%s)" % (path, e))
                continue
            _declare(lib)
            major = lib.ckpt_version() // 10000
            if major != _SUPPORTED_MAJOR:
                raise ImportError("%s is libckpt %s; this ckpt.py supports major version %d"
                                  % (path, lib.ckpt_version_string().decode(), _SUPPORTED_MAJOR))
            _lib, _lib_path = lib, path
            return lib
        raise OSError("libckpt not found; set CKPT_LIBRARY to libckpt.so's path. Tried: "
                      + "; ".join(tried))


def _declare(lib):
    P, c = ctypes.POINTER, ctypes
    sigs = {
        "ckpt_version": (c.c_uint, []),
        "ckpt_version_string": (c.c_char_p, []),
        "ckpt_strerror": (c.c_char_p, [c.c_int]),
        "ckpt_errmsg": (c.c_char_p, [c.c_void_p]),
        "ckpt_open": (c.c_int, [c.c_char_p, P(_Options), P(c.c_void_p)]),
        "ckpt_close": (None, [c.c_void_p]),
        "ckpt_list_jobs": (c.c_int, [c.c_void_p, P(P(c.c_char_p)), P(c.c_size_t)]),
        "ckpt_free_jobs": (None, [P(c.c_char_p), c.c_size_t]),
        "ckpt_list_steps": (c.c_int, [c.c_void_p, c.c_char_p, P(P(_Step)), P(c.c_size_t)]),
        "ckpt_free_steps": (None, [P(_Step)]),
        "ckpt_latest": (c.c_int, [c.c_void_p, c.c_char_p, P(c.c_uint64)]),
        "ckpt_restore_options_init": (None, [P(_RestoreOptions)]),
        "ckpt_restore": (c.c_int, [c.c_void_p, c.c_char_p, c.c_uint64, P(_RestoreOptions),
                                   c.c_char_p, P(_RestoreResult)]),
        "ckpt_verify": (c.c_int, [c.c_void_p, c.c_char_p, c.c_uint64, P(_VerifyResult)]),
        "ckpt_stats_job": (c.c_int, [c.c_void_p, c.c_char_p, P(_Stats)]),
        "ckpt_requests": (None, [c.c_void_p, P(_Requests)]),
        "ckpt_commit": (c.c_int, [c.c_char_p, c.c_char_p, c.c_uint64, c.c_int, c.c_int]),
        "ckpt_wait_durable": (c.c_int, [c.c_char_p, c.c_char_p, c.c_uint64, c.c_double]),
        "ckpt_drain": (c.c_int, [c.c_char_p]),
    }
    for name, (res, args) in sigs.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args


def library_path():
    """The path of the libckpt.so this module loaded (loading it if needed)."""
    _load()
    return _lib_path


def version():
    """The loaded library's version, "MAJOR.MINOR.PATCH"."""
    return _load().ckpt_version_string().decode()


def _b(s):
    return None if s is None else os.fsencode(s)


def _job(job):
    if not isinstance(job, str) or not job:
        raise CkptError(EINVAL, "job must be a non-empty string, not %r" % (job,))
    return job.encode()


def _step_arg(step):
    if isinstance(step, bool) or not isinstance(step, int) or step < 0 or step >= 1 << 64:
        raise CkptError(EINVAL, "step must be an integer in 0..2**64-1, not %r" % (step,))
    return step


def _check(code, handle=None):
    """Raises CkptError for a failed call (detail from the handle, or from
    this thread's buffer for calls without one)."""
    if code != OK:
        msg = _lib.ckpt_errmsg(handle)
        raise CkptError(code, msg.decode(errors="replace") if msg else "")


# --------------------------------------------------------------- the store

class Store:
    """An open store, for repeated use; a context manager.

        with ckpt.Store("file:///srv/ckpt") as st:
            for s in st.list_steps("llama-ft"):
                print(s.step, s.consistent, s.why)

    url: "file:///abs/dir" or "s3://bucket/prefix"; None: $CKPT_STORE, else
    the default store. state_dir, node: as ckpt_options (None: defaults).
    s3_endpoint, s3_signature ("v4"/"v2"), s3_region, s3_addressing
    ("path"/"virtual"), s3_ca_file: s3:// settings as in docs/S3.md (None:
    the environment, else the default). encryption_key_file: the key file
    of an encrypted store (docs/ENCRYPTION.md; None:
    $CKPT_ENCRYPTION_KEY_FILE, else none).
    Raises CkptError (EINVAL for a malformed URL, ESTORE if unreachable).
    """

    def __init__(self, url=None, state_dir=None, node=None, s3_endpoint=None,
                 s3_signature=None, s3_region=None, s3_addressing=None, s3_ca_file=None,
                 encryption_key_file=None):
        lib = _load()
        self._lock = threading.Lock()
        self._h = None
        opts = _Options(_b(state_dir), None if node is None else node.encode(), None, None,
                        _b(s3_endpoint), _b(s3_signature), _b(s3_region), _b(s3_addressing),
                        _b(s3_ca_file), _b(encryption_key_file))
        h = ctypes.c_void_p()
        _check(lib.ckpt_open(_b(url), ctypes.byref(opts), ctypes.byref(h)))
        self._h = h
        self.url = url

    def close(self):
        """Releases the handle; further calls raise CkptError(EINVAL)."""
        with self._lock:
            if self._h is not None:
                _lib.ckpt_close(self._h)
                self._h = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    def _handle(self):
        if self._h is None:
            raise CkptError(EINVAL, "the store is closed")
        return self._h

    def list_jobs(self):
        """Names of the jobs in the store, sorted."""
        with self._lock:
            h = self._handle()
            arr, n = ctypes.POINTER(ctypes.c_char_p)(), ctypes.c_size_t()
            _check(_lib.ckpt_list_jobs(h, ctypes.byref(arr), ctypes.byref(n)), h)
            try:
                return [arr[i].decode() for i in range(n.value)]
            finally:
                _lib.ckpt_free_jobs(arr, n)

    def list_steps(self, job):
        """Every step of job with at least one durable part, consistent or
        not, ascending: a list of Step. An unknown job gives []."""
        with self._lock:
            h = self._handle()
            arr, n = ctypes.POINTER(_Step)(), ctypes.c_size_t()
            _check(_lib.ckpt_list_steps(h, _job(job), ctypes.byref(arr), ctypes.byref(n)), h)
            try:
                return [Step(step=s.step, consistent=bool(s.consistent),
                             complete=bool(s.complete), files=s.files, bytes=s.bytes,
                             nodes=s.nodes, world_size=s.world_size, ranks=s.ranks,
                             why=s.why.decode(errors="replace"), created_ns=s.created_ns)
                        for s in (arr[i] for i in range(n.value))]
            finally:
                _lib.ckpt_free_steps(arr)

    def latest_step(self, job):
        """The latest consistent step of job (complete on every rank and
        durable) as an int, or None when the job has none."""
        with self._lock:
            h = self._handle()
            step = ctypes.c_uint64()
            code = _lib.ckpt_latest(h, _job(job), ctypes.byref(step))
            if code == ENOTFOUND:
                return None
            _check(code, h)
            return step.value

    def restore(self, job, dest, step=None, rank=None, latest=False, no_fallback=False,
                threads=0, progress=None):
        """Restores a consistent step of job into directory dest (created if
        missing), verifying every chunk and file; returns a RestoreResult.

        step: the step; None (or latest=True) takes the latest consistent
        step, falling back to the previous one if it fails verification
        unless no_fallback. rank: only the files written by that rank
        (None: all). threads: parallel downloads (0: 4). progress:
        progress(done_bytes, total_bytes), called from the library's threads
        one at a time; an exception in it is printed and ignored.
        Raises CkptError: ENOTFOUND (no such step, or not consistent: the
        message says why), ECORRUPT, ESTORE, EIO, ENOSPC."""
        use_latest = bool(latest) or step is None
        step = 0 if use_latest else _step_arg(step)
        o = _RestoreOptions()
        _lib.ckpt_restore_options_init(ctypes.byref(o))
        if rank is not None:
            if isinstance(rank, bool) or not isinstance(rank, int) or rank < 0:
                raise CkptError(EINVAL, "rank must be a non-negative int or None, not %r"
                                % (rank,))
            o.rank = rank
        o.latest = int(use_latest)
        o.no_fallback = int(bool(no_fallback))
        o.threads = int(threads)
        cb = None
        if progress is not None:
            def trampoline(_arg, done, total):
                try:
                    progress(done, total)
                except Exception:  # noqa: BLE001 - cannot raise through C
                    import traceback
                    traceback.print_exc()
            cb = _PROGRESS(trampoline)  # kept alive by `cb` for the whole call
            o.progress = cb
        r = _RestoreResult()
        with self._lock:
            h = self._handle()
            _check(_lib.ckpt_restore(h, _job(job), step, ctypes.byref(o), _b(dest),
                                     ctypes.byref(r)), h)
        return RestoreResult(step=r.step, files=r.files, bytes=r.bytes, gets=r.gets,
                             fell_back=bool(r.fell_back), failed_step=r.failed_step,
                             failure=r.failure.decode(errors="replace"))

    def verify(self, job, step):
        """Reads and checks every chunk and file digest of a step; returns a
        VerifyResult. Raises CkptError(ECORRUPT) naming the first bad file
        (the exception's .result holds the counts)."""
        r = _VerifyResult()
        with self._lock:
            h = self._handle()
            code = _lib.ckpt_verify(h, _job(job), _step_arg(step), ctypes.byref(r))
            res = VerifyResult(r.files, r.chunks, r.bytes, r.bad_files)
            try:
                _check(code, h)
            except CkptError as e:
                e.result = res if code == ECORRUPT else None
                raise
        return res

    def stats(self, job):
        """Space accounting of job: a Stats."""
        s = _Stats()
        with self._lock:
            h = self._handle()
            _check(_lib.ckpt_stats_job(h, _job(job), ctypes.byref(s)), h)
        return Stats(*(getattr(s, f[0]) for f in _Stats._fields_))

    def requests(self):
        """Object requests this Store made so far: a dict put/get/stat/list/del."""
        r = _Requests()
        with self._lock:
            _lib.ckpt_requests(self._handle(), ctypes.byref(r))
        return {"put": r.put, "get": r.get, "stat": r.stat, "list": r.list, "del": r.del_}


# ------------------------------------------- one-shot module-level functions

def _with_store(store, fn):
    if isinstance(store, Store):
        return fn(store)
    with Store(store) as st:
        return fn(st)


def latest_step(store, job):
    """The latest consistent step of job, or None. store: a URL or a Store."""
    return _with_store(store, lambda st: st.latest_step(job))


def list_steps(store, job):
    """Steps of job as a list of Step (see Store.list_steps)."""
    return _with_store(store, lambda st: st.list_steps(job))


def list_jobs(store):
    """Job names in the store, sorted."""
    return _with_store(store, lambda st: st.list_jobs())


def restore(store, job, dest, step=None, rank=None, latest=False, no_fallback=False,
            threads=0, progress=None):
    """Restores a step into dest (see Store.restore); step=None restores the
    latest consistent step. Returns a RestoreResult."""
    return _with_store(store, lambda st: st.restore(job, dest, step=step, rank=rank,
                                                    latest=latest, no_fallback=no_fallback,
                                                    threads=threads, progress=progress))


def verify(store, job, step):
    """Checks every chunk and file of a step (see Store.verify)."""
    return _with_store(store, lambda st: st.verify(job, step))


def commit(mountpoint, job, step, rank=None, world_size=None):
    """Commits `step` of `job` for one rank through the ckptfs mount at
    mountpoint: this rank has written everything it will write for the
    step. rank / world_size default to $RANK / $WORLD_SIZE (set by torchrun).
    The step becomes consistent once every rank 0..world_size-1 committed and
    their files are durable. Raises CkptError: EINVAL (bad arguments, or the
    mount refused the commit), ENOTFOUND (not a ckptfs mount), EIO."""
    lib = _load()
    if rank is None:
        rank = int(os.environ.get("RANK", "-1"))
    if world_size is None:
        world_size = int(os.environ.get("WORLD_SIZE", "0"))
    _check(lib.ckpt_commit(_b(mountpoint), _job(job), _step_arg(step), int(rank),
                           int(world_size)))


def wait_durable(mountpoint, job, step, timeout=None):
    """Blocks until `step` of `job` is durable as the ckptfs mount at
    mountpoint sees it (every byte in the object store). timeout: seconds
    (None: no limit; 0: check once). The wait runs in C without the GIL.
    Raises CkptError(ETIMEDOUT) with the last state seen, ENOTFOUND (not a
    ckptfs mount), ECORRUPT (unreadable status)."""
    lib = _load()
    t = -1.0 if timeout is None else float(timeout)
    if timeout is not None and t < 0:
        raise CkptError(EINVAL, "timeout must be >= 0 or None")
    _check(lib.ckpt_wait_durable(_b(mountpoint), _job(job), _step_arg(step), t))


def drain(mountpoint):
    """A preemption notice to the ckptfs mount at mountpoint: its uploader
    takes each job's newest complete step first from now on (docs/SHUTDOWN.md);
    the mount keeps serving. Follow with wait_durable on the newest step.
    Raises CkptError: ENOTFOUND (not a ckptfs mount), EIO."""
    _check(_load().ckpt_drain(_b(mountpoint)))
