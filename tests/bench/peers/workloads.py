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
  finetune  a frozen backbone: the model is saved whole, but only the last
            two layers and the final norm train, so only they and their
            AdamW state change (the optimizer holds state for them only)
  ddp       4 data-parallel ranks save the same state, each under its own
            name (step-N/rank{r}.pt), at once (4 forked processes), then
            rank 0 writes the empty step marker .ckpt-complete (ckptfs's
            explicit completion, docs/STEPS.md R1; an empty file for the
            others); each rank's state is a quarter of the size, so the
            step is the size asked for
"""
import math
import os

import torch

MIB = 1 << 20
RANKS = 4


def build_model(n_params, dtype):
    """A transformer (embedding, encoder layers, final norm) of about
    n_params parameters (at least one layer), in dtype."""
    torch.manual_seed(1234)
    d = 1024 if n_params >= 16 * MIB else 256
    vocab = 32000 if n_params >= 16 * MIB else 4000
    per_layer = 12 * d * d + 13 * d  # attention in/out, FFN 4d, 2 LayerNorms, biases
    layers = max(1, math.ceil((n_params - vocab * d) / per_layer))
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

    def save(self, job_dir, step):
        self.state["step"] = step
        torch.save(self.state, os.path.join(job_dir, self.files(step)[0]))


class Full(Scenario):
    name, dtype, bytes_per_param = "full", torch.float32, 12

    def build(self, size):
        model = build_model(size // self.bytes_per_param, self.dtype)
        opt = adamw_state(list(model.parameters()))
        state = {"step": 0, "model": model.state_dict(), "optim": opt.state_dict()}
        return state, list(float_tensors(state))


class Bf16(Full):
    name, dtype, bytes_per_param = "bf16", torch.bfloat16, 6


class Finetune(Scenario):
    """Weights 4 bytes per parameter; the trainable tail also 8 for AdamW."""
    name = "finetune"

    def build(self, size):
        model = build_model(size // 4, torch.float32)
        layers = list(model.children())
        trainable = [p for m in layers[-3:] for p in m.parameters()]
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


SCENARIOS = {c.name: c for c in (Full, Bf16, Finetune, Ddp)}
