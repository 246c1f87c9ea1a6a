#!/usr/bin/python3
"""codec_make_ckpts.py — trained torch checkpoints for bench_codec.

A small transformer language model is trained on real text, so that the
weights and AdamW moments have a trained model's statistics (random initial
weights, or training on random tokens, do not), then saved the ways a
training loop saves it. Writes into OUTDIR (default /tmp/codec-ckpt):

  torch.save (the names other scripts and docs use):
    fp32.pt    {"model": state_dict, "optimizer": AdamW state (exp_avg,
               exp_avg_sq), "step": n};
    bf16.pt    {"model": the same weights in bf16};
    mixed.pt   what a mixed-precision loop saves: bf16 weights, then the fp32
               master weights and AdamW state in the same file;
    int8.pt    the weights quantized per tensor to int8, the case where
               plain LZ4 should beat any shuffle.
  safetensors (the same content as the .pt of the same name, optimizer state
  flattened to optimizer.state.<i>.exp_avg etc.):
    fp32.safetensors, bf16.safetensors, mixed.safetensors
  torch.distributed.checkpoint, one process (the same flattened names):
    dcp-fp32/  weights and AdamW state in fp32;
    dcp-mixed/ bf16 weights, fp32 master weights and AdamW state.
    Each holds __0_0.distcp (the data) and a small .metadata.
  per tensor kind, the raw bytes of every tensor of that kind concatenated
  (tensor.numpy().tobytes(), bf16 as its int16 view):
    kind-weights-fp32.bin, kind-weights-bf16.bin, kind-exp_avg.bin,
    kind-exp_avg_sq.bin

The text is Debian's package changelogs (/usr/share/doc/*/changelog.Debian.gz,
about a thousand files on a Debian system), read in sorted order; tokens are
its bytes (vocabulary 256). Training batches windows of the text at offsets
drawn from a seeded generator; 1% of the text, taken at its end, is held out
and its loss printed before and after training. Without changelogs the script
exits non-zero: it never falls back to random data.

Usage: /usr/bin/python3 tests/bench/codec_make_ckpts.py [OUTDIR] [--steps N]
Faster with LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-pthread.
"""
import argparse
import glob
import gzip
import math
import os
import sys
import time

import torch
import torch.nn as nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "peers"))
import workloads  # noqa: E402  (import_dcp: DCP under Python 3.11)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_writer  # noqa: E402

CHANGELOGS = "/usr/share/doc/*/changelog.Debian.gz"
SEQ = 128    # tokens per training window
BATCH = 16   # windows per step


class TinyLM(nn.Module):
    """Byte embedding plus learned positions, a pre-norm causal transformer
    encoder stack, a final norm and an untied output projection."""

    def __init__(self, vocab=256, d=256, layers=4, heads=4, ff=1024, seq=SEQ):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(seq, d)
        layer = nn.TransformerEncoderLayer(d, heads, ff, dropout=0.0, batch_first=True,
                                           norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, layers)
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        # Causal: without it each position sees the byte it must predict.
        self.register_buffer("mask", torch.triu(torch.full((seq, seq), float("-inf")), 1),
                             persistent=False)

    def forward(self, tokens):
        t = tokens.shape[1]
        x = self.embed(tokens) + self.pos(torch.arange(t))
        return self.head(self.norm(self.blocks(x, mask=self.mask[:t, :t])))


def load_text():
    """The changelogs' bytes, as one uint8 tensor. Exits if there are none:
    a benchmark of trained weights must not quietly train on anything else."""
    paths = sorted({os.path.realpath(p) for p in glob.glob(CHANGELOGS)})
    parts = []
    for p in paths:
        try:
            with gzip.open(p, "rb") as f:
                parts.append(f.read())
        except (OSError, EOFError) as e:
            print(f"codec_make_ckpts: skipping {p}: {e}", file=sys.stderr)
    data = b"\n".join(parts)
    if len(data) < 1 << 20:
        sys.exit(f"codec_make_ckpts: found {len(parts)} changelogs ({len(data)} bytes) under "
                 f"{CHANGELOGS}; need at least 1 MiB of real text to train on (install some "
                 "Debian packages, or run on a Debian system). Not falling back to random data.")
    print(f"text: {len(parts)} changelogs, {len(data) / 1e6:.1f} MB, byte tokens")
    return torch.frombuffer(bytearray(data), dtype=torch.uint8)


def batch(text, gen, n=BATCH):
    """n windows of SEQ + 1 bytes at random offsets, as int64 tokens."""
    starts = torch.randint(0, len(text) - SEQ - 1, (n,), generator=gen)
    return torch.stack([text[s:s + SEQ + 1] for s in starts.tolist()]).long()


def loss_of(model, tokens):
    logits = model(tokens[:, :-1])
    return nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                       tokens[:, 1:].reshape(-1))


def train(steps):
    text = load_text()
    split = len(text) - len(text) // 100
    train_text, held_text = text[:split], text[split:]
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    held = batch(held_text, torch.Generator().manual_seed(1), 32)

    model = TinyLM()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    warmup = 10  # a short linear warm-up keeps the first Adam steps stable
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warmup))
    with torch.no_grad():
        print(f"held-out loss before: {loss_of(model, held).item():.3f} "
              f"(uniform over 256 bytes: {math.log(256):.3f})")
    t0 = time.monotonic()
    for step in range(steps):
        loss = loss_of(model, batch(train_text, gen))
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        if step % 10 == 0 or step == steps - 1:
            print(f"step {step} loss {loss.item():.3f} ({time.monotonic() - t0:.0f} s)")
    with torch.no_grad():
        print(f"held-out loss after {steps} steps: {loss_of(model, held).item():.3f}")
    return model, opt


def flat_optimizer(opt):
    """AdamW's per-parameter state as flat name -> tensor
    (optimizer.state.<i>.exp_avg, .exp_avg_sq, .step)."""
    out = {}
    for i, st in opt.state_dict()["state"].items():
        for k, v in st.items():
            out[f"optimizer.state.{i}.{k}"] = v if torch.is_tensor(v) else torch.tensor(v)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("outdir", nargs="?", default="/tmp/codec-ckpt")
    ap.add_argument("--steps", type=int, default=150)
    args = ap.parse_args()
    out = lambda name: os.path.join(args.outdir, name)  # noqa: E731

    model, opt = train(args.steps)
    os.makedirs(args.outdir, exist_ok=True)  # after the text was found
    fp32 = model.state_dict()
    bf16 = {k: v.to(torch.bfloat16) for k, v in fp32.items()}
    optim = flat_optimizer(opt)
    paths = []

    # torch.save
    torch.save({"model": fp32, "optimizer": opt.state_dict(), "step": args.steps}, out("fp32.pt"))
    torch.save({"model": bf16}, out("bf16.pt"))
    torch.save({"model": bf16, "master": fp32, "optimizer": opt.state_dict(),
                "step": args.steps}, out("mixed.pt"))
    int8 = {}
    for k, v in fp32.items():
        scale = float(v.abs().max()) / 127 or 1.0
        int8[k] = torch.quantize_per_tensor(v.float(), scale, 0, torch.qint8).int_repr()
    torch.save({"model": int8}, out("int8.pt"))
    paths += ["fp32.pt", "bf16.pt", "mixed.pt", "int8.pt"]

    # safetensors and DCP, flat names; the step goes in as metadata / a value
    prefixed = lambda p, d: {f"{p}.{k}": v for k, v in d.items()}  # noqa: E731
    whole = {
        "fp32": {**prefixed("model", fp32), **optim},
        "bf16": prefixed("model", bf16),
        "mixed": {**prefixed("model", bf16), **prefixed("master", fp32), **optim},
    }
    for name, tensors in whole.items():
        safetensors_writer.save(tensors, out(f"{name}.safetensors"),
                                {"format": "pt", "step": str(args.steps)})
        paths.append(f"{name}.safetensors")
    dcp = workloads.import_dcp()
    for name in ("fp32", "mixed"):
        d = out(f"dcp-{name}")
        os.makedirs(d, exist_ok=True)
        writer = dcp.FileSystemWriter(d, single_file_per_rank=True)  # __0_0.distcp
        dcp.save_state_dict({**whole[name], "step": args.steps}, writer, no_dist=True)
        paths += [os.path.join(f"dcp-{name}", f) for f in sorted(os.listdir(d))]

    # per tensor kind
    kinds = {
        "weights-fp32": fp32.values(),
        "weights-bf16": bf16.values(),
        "exp_avg": [v for k, v in optim.items() if k.endswith(".exp_avg")],
        "exp_avg_sq": [v for k, v in optim.items() if k.endswith(".exp_avg_sq")],
    }
    for kind, tensors in kinds.items():
        with open(out(f"kind-{kind}.bin"), "wb") as f:
            for t in tensors:
                f.write(safetensors_writer.raw_bytes(t))
        paths.append(f"kind-{kind}.bin")

    for p in paths:
        print(f"{p}: {os.path.getsize(out(p)) / 1e6:.3f} MB")


if __name__ == "__main__":
    main()
