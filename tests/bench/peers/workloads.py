"""workloads.py - the checkpoints the peer benchmark saves: real PyTorch
state (a transformer and its AdamW state), written the way a training loop
writes it. Imported by peers_bench.py; no I/O besides the saves.

A Scenario is built once (untimed), then, per save: perturb() (untimed: the
values that training would change), save(dir, step) (timed by the caller:
what the trainer waits for), and files(step) names what that save wrote,
relative to the job directory. Every scenario saves
torch.save({"step", "model", "optim"}, ...) as the seed's loop does.

  full      full training, fp32: every weight and optimizer value changes
  bf16      full training, weights and AdamW state in bf16
  mixed     mixed-precision training: the bf16 weights the model computes
            with, then the fp32 master weights and their AdamW state
  finetune  a frozen backbone: the model is saved whole, but only the last
            two layers and the final norm train, so only they and their
            AdamW state change (the optimizer holds state for them only)
  ddp       4 data-parallel ranks save the same state, each under its own
            name (step-N/rank{r}.pt), at once (4 forked processes), then
            rank 0 writes the empty step marker .ckpt-complete (ckptfs's
            explicit completion, docs/STEPS.md R1; an empty file for the
            others); each rank's state is a quarter of the size, so the
            step is the size asked for
  dcp       a 4-rank torch.distributed.checkpoint step: 4 processes of one
            gloo group, each holding a quarter of every tensor's rows
            (ShardedTensor), save step-N/__R_0.distcp and .metadata
            (Dcp says how); the resume loads it with DCP

Sizes: a scenario of N MiB saves N MiB (+0.5% or less from 64 MiB up; the
8 MiB smoke sizes are within 16%): build_model sizes the vocabulary to the
parameter count the scenario's bytes per parameter give.
"""
import ctypes
import datetime
import os
import pickle
import signal
import socket
import time

import dataclasses

import torch
import torch.distributed as dist


def import_dcp():
    """torch.distributed.checkpoint as Debian's torch 1.13 ships it (under
    its pre-2.0 name, torch.distributed._shard.checkpoint). Its import fails
    on Python 3.11 ("mutable default TensorProperties for field
    tensor_properties": 3.11 refuses an unhashable dataclass default; fixed
    upstream in pytorch/pytorch#91795 by default_factory), so TensorProperties
    is made hashable for the import: the field's default is never changed
    in place by DCP's save or load."""
    plain = dataclasses.dataclass

    def hashable(cls=None, **kw):
        def wrap(c):
            if c.__name__ == "TensorProperties":
                kw.setdefault("unsafe_hash", True)
            return plain(c, **kw)
        return wrap if cls is None else wrap(cls)

    dataclasses.dataclass = hashable
    try:
        import torch.distributed._shard.checkpoint as mod
    finally:
        dataclasses.dataclass = plain
    return mod


dcp = import_dcp()

MIB = 1 << 20
RANKS = 4


def per_layer(d):
    """Parameters of one encoder layer of width d: attention in/out
    projections, FFN of 4d, two LayerNorms, biases."""
    return 12 * d * d + 13 * d


def shape(n_params, min_layers):
    """(width, layers) for about n_params parameters: the largest width of
    2048..128 that leaves at least min_layers layers in three quarters of
    the parameters (the embedding takes the rest)."""
    d = next((w for w in (2048, 1024, 512, 256) if 0.75 * n_params >= min_layers * per_layer(w)),
             128)
    return d, max(1, int(0.75 * n_params // per_layer(d)))


def build_model(n_params, dtype, dims=None):
    """A transformer (embedding, encoder layers, final norm) of n_params
    parameters in dtype, of shape dims (default shape(n_params, 4)). The
    vocabulary takes what the layers leave, so the count is exact to one
    embedding row: a fixed vocabulary of 32000 x 1024 alone is 393 MiB with
    AdamW in fp32, which made "256 MiB" save 519 MiB."""
    torch.manual_seed(1234)
    d, layers = dims or shape(n_params, 4)
    vocab = max(16, (n_params - layers * per_layer(d) - 2 * d) // d)
    model = torch.nn.Sequential(
        torch.nn.Embedding(vocab, d),
        *[torch.nn.TransformerEncoderLayer(d, max(1, d // 64), 4 * d, batch_first=True)
          for _ in range(layers)],
        torch.nn.LayerNorm(d))
    return model.to(dtype)


def adamw_state(params):
    """AdamW after one step over params: exp_avg and exp_avg_sq exist."""
    opt = torch.optim.AdamW(params, lr=1e-4)
    for p in params:
        p.grad = torch.randn_like(p) * 1e-3
    opt.step()
    for p in params:
        p.grad = None
    return opt


def float_tensors(obj):
    if torch.is_tensor(obj):
        if obj.is_floating_point():
            yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from float_tensors(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from float_tensors(v)


def nbytes(obj):
    return sum(t.numel() * t.element_size() for t in float_tensors(obj))


class Scenario:
    name = ""

    def __init__(self, size_bytes):
        self.size = size_bytes
        self.state, self.changing = self.build(size_bytes)

    def perturb(self):
        """Untimed: change what training changes (in place)."""
        with torch.no_grad():  # trainable parameters are leaves that need grad
            for t in self.changing:
                t.add_(1e-3)

    def files(self, step):
        return ["ckpt-%06d.pt" % step]

    def data_files(self, step):
        """What a resume reads and the check hashes: files() less the empty
        step marker."""
        return [f for f in self.files(step) if not f.endswith("/.ckpt-complete")]

    def save(self, job_dir, step):
        self.state["step"] = step
        torch.save(self.state, os.path.join(job_dir, self.files(step)[0]))

    def load(self, job_dir, files):
        """A new node's resume: every file of the step, into memory."""
        for f in files:
            torch.load(os.path.join(job_dir, f), map_location="cpu")

    def close(self):
        pass


class Full(Scenario):
    name, dtype, bytes_per_param = "full", torch.float32, 12

    def build(self, size):
        model = build_model(size // self.bytes_per_param, self.dtype)
        opt = adamw_state(list(model.parameters()))
        state = {"step": 0, "model": model.state_dict(), "optim": opt.state_dict()}
        return state, list(float_tensors(state))


class Bf16(Full):
    name, dtype, bytes_per_param = "bf16", torch.bfloat16, 6


class Mixed(Scenario):
    """bf16 weights (2 bytes per parameter), fp32 master weights (4) and
    their AdamW state (8), as a mixed-precision loop saves them; the bf16
    copy is the master rounded, so it changes with it."""
    name, bytes_per_param = "mixed", 14

    def build(self, size):
        model = build_model(size // self.bytes_per_param, torch.float32)
        opt = adamw_state(list(model.parameters()))
        master = model.state_dict()
        state = {"step": 0, "model": {k: v.to(torch.bfloat16) for k, v in master.items()},
                 "master": master, "optim": opt.state_dict()}
        return state, list(float_tensors(state))

    def perturb(self):
        super().perturb()
        with torch.no_grad():
            for k, v in self.state["master"].items():
                self.state["model"][k].copy_(v)


class Finetune(Scenario):
    """Weights 4 bytes per parameter; the trainable tail (two layers and the
    final norm) 8 more for AdamW. At least 12 layers, so the tail is a
    fine-tuning's share of the model, not half of it."""
    name = "finetune"

    def build(self, size):
        d, layers = shape(size // 5, 12)
        tail = 2 * per_layer(d) + 2 * d
        model = build_model((size - 8 * tail) // 4, torch.float32, (d, layers))
        children = list(model.children())
        trainable = [p for m in children[-3:] for p in m.parameters()]
        for p in model.parameters():
            p.requires_grad_(False)
        for p in trainable:
            p.requires_grad_(True)
        opt = adamw_state(trainable)
        state = {"step": 0, "model": model.state_dict(), "optim": opt.state_dict()}
        # model.state_dict() shares storage with the parameters: changing a
        # trainable parameter changes the saved tensor.
        changing = trainable + list(float_tensors(state["optim"]))
        return state, changing


class Ddp(Full):
    name = "ddp"

    def __init__(self, size_bytes):
        super().__init__(size_bytes // RANKS)
        self.size = size_bytes

    def files(self, step):
        d = "step-%06d" % step
        return ["%s/rank%d.pt" % (d, r) for r in range(RANKS)] + [d + "/.ckpt-complete"]

    def save(self, job_dir, step):
        self.state["step"] = step
        names = self.files(step)
        os.makedirs(os.path.join(job_dir, os.path.dirname(names[0])), exist_ok=True)
        pids = []
        for r in range(RANKS):
            pid = os.fork()
            if pid == 0:  # one rank: its own process, as torchrun would start
                code = 1
                try:
                    torch.save(self.state, os.path.join(job_dir, names[r]))
                    code = 0
                finally:
                    os._exit(code)
            pids.append(pid)
        failed = [p for p in pids if os.waitpid(p, 0)[1] != 0]
        if failed:
            raise RuntimeError("ddp: %d rank(s) failed to save step %d" % (len(failed), step))
        with open(os.path.join(job_dir, names[-1]), "wb"):
            pass



def flat(state, prefix=""):
    """A nested state as DCP 1.13 wants it: one key per tensor ("optim.state.3.
    exp_avg"), anything else (param_groups, step) one pickled value."""
    out = {}
    for k, v in state.items():
        key = "%s%s" % (prefix, k)
        if isinstance(v, dict) and v:
            out.update(flat(v, key + "."))
        else:
            out[key] = v
    return out


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Dcp(Full):
    """A sharded (FSDP-style) job of 4 ranks in one gloo process group
    (forked once, at build, so a save times the step, not a start-up): every
    tensor of the state is split by rows, rank r holding the r-th quarter
    as a ShardedTensor (1.13's planner writes a plain tensor from the
    coordinator only; 0-d and tiny tensors stay plain, rank 0 writes them).
    Each rank's rows get values of their own. A save is dcp.save_state_dict
    on all 4 at once (FileSystemWriter with one file per rank:
    step-N/__R_0.distcp, then rank 0 writes .metadata.tmp and renames it to
    .metadata; every file fsynced, DCP's default); a resume is
    dcp.load_state_dict of the whole step into plain tensors in one
    process (DCP reassembles the shards)."""
    name = "dcp"

    def __init__(self, size_bytes):
        super().__init__(size_bytes)
        self.ranks = []  # (pid, parent end of its socket pair, its reader)
        port = free_port()
        try:
            for r in range(RANKS):
                mine, theirs = socket.socketpair()
                pid = os.fork()
                if pid == 0:
                    mine.close()
                    for _, c, _ in self.ranks:  # the earlier ranks' ends: theirs to close
                        c.close()
                    code = 1
                    try:
                        self._rank_main(r, theirs, port)
                        code = 0
                    finally:
                        os._exit(code)
                theirs.close()
                self.ranks.append((pid, mine, mine.makefile("rb")))
            self._all("ready")
        except BaseException:
            self.close()
            raise

    def _flat(self):
        return {k: v for k, v in flat(self.state).items() if k != "step"}

    def _rank_main(self, r, conn, port):
        from torch.distributed._shard.metadata import ShardMetadata
        from torch.distributed._shard.sharded_tensor import Shard, init_from_local_shards

        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: die with the bench
        torch.set_num_threads(1)
        dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port, rank=r,
                                world_size=RANKS, timeout=datetime.timedelta(seconds=300))
        mine, tensors = {}, []
        for k, v in self._flat().items():
            if not torch.is_tensor(v) or v.dim() == 0 or v.size(0) < RANKS:
                mine[k] = v
                continue
            rows = torch.tensor_split(torch.arange(v.size(0)), RANKS)[r]
            local = v[rows[0]:rows[-1] + 1].clone()  # its own pages, not the parent's
            md = ShardMetadata([int(rows[0])] + [0] * (v.dim() - 1), list(local.shape),
                               "rank:%d/cpu" % r)
            mine[k] = init_from_local_shards([Shard(local, md)], *v.shape)
            if local.is_floating_point():
                with torch.no_grad():
                    local.add_(1e-2 * (r + 1))
                tensors.append(local)
        rfile = conn.makefile("rb")
        send(conn, "ready")
        while True:
            cmd = pickle.load(rfile)
            try:
                if cmd[0] == "quit":
                    return
                if cmd[0] == "perturb":
                    with torch.no_grad():
                        for t in tensors:
                            t.add_(1e-3)
                elif cmd[0] == "save":
                    mine["step"] = cmd[2]
                    dcp.save_state_dict(mine, dcp.FileSystemWriter(cmd[1], single_file_per_rank=True))
                send(conn, "ok")
            except Exception as e:
                send(conn, "rank %d: %s: %s" % (r, type(e).__name__, e))

    def _all(self, *cmd):
        """Sends cmd to every rank (none for "ready") and waits for each."""
        for _, c, _ in self.ranks:
            if cmd[0] != "ready":
                c.sendall(pickle.dumps(cmd))
        errors = []
        for _, _, rfile in self.ranks:
            try:
                got = pickle.load(rfile)
            except EOFError:
                got = "a rank exited"
            if got not in ("ok", "ready"):
                errors.append(got)
        if errors:
            raise RuntimeError("dcp %s: %s" % (cmd[0], "; ".join(errors)))

    def perturb(self):
        self._all("perturb")

    def files(self, step):
        d = "step-%06d" % step
        return ["%s/__%d_0.distcp" % (d, r) for r in range(RANKS)] + [d + "/.metadata"]

    def save(self, job_dir, step):
        self._all("save", os.path.join(job_dir, "step-%06d" % step), step)

    def load(self, job_dir, files):
        step_dir = os.path.join(job_dir, os.path.dirname(files[0]))
        template = {k: torch.empty_like(v) if torch.is_tensor(v) else None
                    for k, v in self._flat().items()}
        template["step"] = None
        dcp.load_state_dict(template, dcp.FileSystemReader(step_dir), no_dist=True)
        if template["step"] is None:
            raise RuntimeError("dcp: %s loaded without its step" % step_dir)

    def close(self):
        """Stops the ranks: "quit", then after 10 s SIGKILL (a rank stuck in
        a collective whose peer died)."""
        for _, c, rfile in self.ranks:
            try:
                c.sendall(pickle.dumps(("quit",)))
            except OSError:
                pass
            rfile.close()
            c.close()
        deadline = time.monotonic() + 10
        for pid, _, _ in self.ranks:
            while os.waitpid(pid, os.WNOHANG)[0] == 0:
                if time.monotonic() > deadline:
                    os.kill(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)
                    break
                time.sleep(0.05)
        self.ranks = []


def send(conn, msg):
    conn.sendall(pickle.dumps(msg))


SCENARIOS = {c.name: c for c in (Full, Bf16, Mixed, Finetune, Ddp, Dcp)}
