#!/usr/bin/python3
"""codec_make_ckpts.py — real torch checkpoints for bench_codec.

Writes into OUTDIR (default /tmp/codec-ckpt):
  fp32.pt  a small transformer language model trained for a few AdamW steps:
           {"model": state_dict, "optimizer": AdamW state (exp_avg,
           exp_avg_sq), "step": n} — what a training loop saves (~50 MB);
  bf16.pt  the same weights after model.to(torch.bfloat16) (~8 MB);
  int8.pt  the same weights quantized per tensor to int8 (~4 MB), the case
           where plain LZ4 should beat any shuffle;
  mixed.pt what a mixed-precision loop saves: bf16 weights, then the fp32
           master weights and AdamW state in the same file (~58 MB).

The data is random tokens: the bytes still come from real training (Adam
moments, updated weights), which is what the codec sees.

Usage: /usr/bin/python3 tests/bench/codec_make_ckpts.py [OUTDIR] [--steps N]
Faster with LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-pthread.
"""
import argparse
import os

import torch
import torch.nn as nn


class TinyLM(nn.Module):
    """Token embedding, a pre-norm transformer encoder stack, tied output."""

    def __init__(self, vocab=2048, d=256, layers=4, heads=4, ff=1024):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        layer = nn.TransformerEncoderLayer(d, heads, ff, dropout=0.0, batch_first=True,
                                           norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, layers)
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, tokens):
        return self.head(self.norm(self.blocks(self.embed(tokens))))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("outdir", nargs="?", default="/tmp/codec-ckpt")
    ap.add_argument("--steps", type=int, default=5)
    args = ap.parse_args()
    os.makedirs(args.outdir, exist_ok=True)
    torch.manual_seed(0)

    model = TinyLM()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    loss_fn = nn.CrossEntropyLoss()
    for step in range(args.steps):
        tokens = torch.randint(0, 2048, (4, 64))
        logits = model(tokens[:, :-1])
        loss = loss_fn(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"step {step} loss {loss.item():.3f}")

    paths = {}
    paths["fp32"] = os.path.join(args.outdir, "fp32.pt")
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(),
                "step": args.steps}, paths["fp32"])

    bf16 = {k: v.to(torch.bfloat16) for k, v in model.state_dict().items()}
    paths["bf16"] = os.path.join(args.outdir, "bf16.pt")
    torch.save({"model": bf16}, paths["bf16"])

    paths["mixed"] = os.path.join(args.outdir, "mixed.pt")
    torch.save({"model": bf16, "master": model.state_dict(), "optimizer": opt.state_dict(),
                "step": args.steps}, paths["mixed"])

    int8 = {}
    for k, v in model.state_dict().items():
        scale = float(v.abs().max()) / 127 or 1.0
        int8[k] = torch.quantize_per_tensor(v.float(), scale, 0, torch.qint8).int_repr()
    paths["int8"] = os.path.join(args.outdir, "int8.pt")
    torch.save({"model": int8}, paths["int8"])

    for name, p in paths.items():
        print(f"{name}: {p} {os.path.getsize(p) / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
