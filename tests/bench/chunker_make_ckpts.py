#!/usr/bin/python3
"""chunker_make_ckpts.py — real torch checkpoints for the chunker's dedup table.

    /usr/bin/python3 tests/bench/chunker_make_ckpts.py OUTDIR

Trains a small transformer (~4.6 M parameters; with AdamW state a torch.save
file is ~55 MB) and writes pairs of files where bytes do or do not repeat:

  full      full training, steps 10 and 11 (almost nothing repeats)
  lora      frozen backbone + trainable LoRA adapters, steps 20 and 30,
            saved as ckpt_000020.pt / ckpt_000030.pt (archive names differ)
  ddp       the step-30 fine-tune state saved by "two ranks" under names of
            different length
  dcp       torch 1.13 DCP (FileSystemWriter) shard of the step-30 model vs
            torch.save of the same model state
  legacy    the lora pair in torch's legacy (non-ZIP) format: unknown data
  safet     the lora pair as safetensors (written here; no package needed)

For each pair it writes OUTDIR/pairs.tsv: name, A, B, and repeated_pct — the
% of B's bytes that are tensor payloads also present byte-for-byte in A, the
ground truth a perfect chunker could find.
"""
import copy
import hashlib
import os
import sys
import types

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_writer  # noqa: E402


def patch_dcp_import():
    """torch 1.13 + Python 3.11: a dataclass field with a mutable default
    breaks `import torch.distributed._shard.checkpoint`. Load that one module
    from patched source (default -> default_factory); never touch system files."""
    base = os.path.join(os.path.dirname(torch.__file__), "distributed", "_shard")
    # Load the two metadata modules from source, before their packages: the
    # packages' __init__ chain needs the patched class already defined.
    for name, rel in (("torch.distributed._shard.metadata", "metadata.py"),
                      ("torch.distributed._shard.sharded_tensor.metadata",
                       os.path.join("sharded_tensor", "metadata.py"))):
        if name in sys.modules:
            continue
        origin = os.path.join(base, rel)
        src = open(origin).read().replace("field(default=TensorProperties())",
                                          "field(default_factory=TensorProperties)")
        mod = types.ModuleType(name)
        mod.__file__ = origin
        sys.modules[name] = mod
        exec(compile(src, origin, "exec"), mod.__dict__)


class LoRALinear(nn.Module):
    def __init__(self, base, rank=8):
        super().__init__()
        self.base = base
        self.lora_a = nn.Parameter(torch.randn(rank, base.in_features) * 0.01)
        self.lora_b = nn.Parameter(torch.zeros(base.out_features, rank))

    def forward(self, x):
        return self.base(x) + (x @ self.lora_a.t()) @ self.lora_b.t()


class Model(nn.Module):
    def __init__(self, vocab=4000, d=256, layers=4, ff=1024):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        layer = nn.TransformerEncoderLayer(d, 4, ff, batch_first=True)
        self.enc = nn.TransformerEncoder(layer, layers)
        self.head = nn.Linear(d, vocab)

    def forward(self, x):
        return self.head(self.enc(self.emb(x)))


def train(model, opt, steps, vocab=4000):
    for _ in range(steps):
        x = torch.randint(0, vocab, (4, 32))
        loss = nn.functional.cross_entropy(model(x).flatten(0, 1), x.flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()


def tensors_of(obj):
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from tensors_of(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from tensors_of(v)


def payload_digests(obj):
    out = {}
    for t in tensors_of(obj):
        b = t.detach().contiguous().numpy().tobytes()
        out[hashlib.sha256(b).digest()] = len(b)
    return out


def repeated_pct(obj_a, obj_b, path_b):
    da, db = payload_digests(obj_a), payload_digests(obj_b)
    rep = sum(n for h, n in db.items() if h in da)
    return 100.0 * rep / os.path.getsize(path_b)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "/tmp/chunker_ckpts"
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    pairs = []

    def p(name):
        return os.path.join(out, name)

    # full training: consecutive checkpoints, everything changes
    model = Model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    train(model, opt, 10)
    # deepcopy: state_dict() holds live tensors that the next step mutates
    full_a = copy.deepcopy({"model": model.state_dict(), "optim": opt.state_dict(), "step": 10})
    torch.save(full_a, p("ckpt_000010.pt"))
    train(model, opt, 1)
    full_b = copy.deepcopy({"model": model.state_dict(), "optim": opt.state_dict(), "step": 11})
    torch.save(full_b, p("ckpt_000011.pt"))
    pairs.append(("full", "ckpt_000010.pt", "ckpt_000011.pt",
                  repeated_pct(full_a, full_b, p("ckpt_000011.pt"))))

    # frozen backbone (and head) + trainable LoRA adapters on the FF layers
    for prm in model.parameters():
        prm.requires_grad_(False)
    for layer in model.enc.layers:
        layer.linear1 = LoRALinear(layer.linear1)
        layer.linear2 = LoRALinear(layer.linear2)
    opt = torch.optim.AdamW([q for q in model.parameters() if q.requires_grad], lr=1e-3)
    states = {}
    for step in (20, 30):
        train(model, opt, 10)
        st = copy.deepcopy({"model": model.state_dict(), "optim": opt.state_dict(), "step": step})
        states[step] = st
        torch.save(st, p("ckpt_%06d.pt" % step))
        torch.save(st, p("legacy_%06d.pt" % step), _use_new_zipfile_serialization=False)
        safetensors_writer.save({k: st["model"][k] for k in sorted(st["model"])},
                              p("model_%06d.safetensors" % step), {"format": "pt"})
    a, b = states[20], states[30]
    pairs.append(("lora", "ckpt_000020.pt", "ckpt_000030.pt", repeated_pct(a, b, p("ckpt_000030.pt"))))
    pairs.append(("legacy", "legacy_000020.pt", "legacy_000030.pt",
                  repeated_pct(a, b, p("legacy_000030.pt"))))
    pairs.append(("safet", "model_000020.safetensors", "model_000030.safetensors",
                  repeated_pct(a["model"], b["model"], p("model_000030.safetensors"))))

    # two ranks, same state, different file (= archive) names
    torch.save(b, p("ddp_rank0.pt"))
    torch.save(b, p("ddp_rank0001.pt"))
    pairs.append(("ddp", "ddp_rank0.pt", "ddp_rank0001.pt", repeated_pct(b, b, p("ddp_rank0001.pt"))))

    # DCP shard vs torch.save of the same (flat) model state
    try:
        patch_dcp_import()
        import torch.distributed._shard.checkpoint as dcp
        d = p("dcp_step30")
        os.makedirs(d, exist_ok=True)
        dcp.save_state_dict(b["model"], dcp.FileSystemWriter(d, single_file_per_rank=True), no_dist=True)
        torch.save(b["model"], p("model_step30.pt"))
        shard = [f for f in sorted(os.listdir(d)) if f.endswith(".distcp")][0]
        os.replace(os.path.join(d, shard), p("dcp_shard.distcp"))
        pairs.append(("dcp", "model_step30.pt", "dcp_shard.distcp",
                      repeated_pct(b["model"], b["model"], p("dcp_shard.distcp"))))
    except Exception as e:  # DCP is optional for the table
        print("dcp skipped:", e, file=sys.stderr)

    with open(p("pairs.tsv"), "w") as f:
        for name, fa, fb, rep in pairs:
            f.write("%s\t%s\t%s\t%.2f\n" % (name, p(fa), p(fb), rep))
    for name, fa, fb, rep in pairs:
        print("%-7s %-26s %-26s %6.1f MB  repeated %.2f%%" %
              (name, fa, fb, os.path.getsize(p(fb)) / 1e6, rep))


if __name__ == "__main__":
    main()
