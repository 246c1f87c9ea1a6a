"""Real PyTorch checkpoints for the tests: tiny models trained on CPU with
Debian's python3-torch, saved with torch.save exactly as trainers do.

    torch_ckpt.py train    OUT --steps 6 --every 2    ckpt-{step:06d}.pt every K steps
    torch_ckpt.py finetune OUT                        frozen backbone: OUT/a/ckpt_000020.pt,
                                                      OUT/b/ckpt_000030.pt; prints repeated bytes
    torch_ckpt.py ranks    OUT                        same state as rank0.pt and rank1.pt

Every command prints one JSON object on stdout describing what it wrote.
"""
import argparse
import json
import os
import sys

import torch


def make_model(width=512, depth=4, seed=0):
    torch.manual_seed(seed)
    layers = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    layers.append(torch.nn.Linear(width, 10))
    return torch.nn.Sequential(*layers)


def train_steps(model, opt, steps, seed=1):
    g = torch.Generator().manual_seed(seed)
    width = model[0].in_features
    for _ in range(steps):
        x = torch.randn(32, width, generator=g)
        y = torch.randint(0, 10, (32,), generator=g)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return float(loss)


def save(path, model, opt, step):
    torch.save({"step": step, "model": model.state_dict(), "optimizer": opt.state_dict()}, path)


def cmd_train(args):
    os.makedirs(args.out, exist_ok=True)
    model = make_model(width=args.width)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    files = []
    for step in range(1, args.steps + 1):
        train_steps(model, opt, 1, seed=step)
        if step % args.every == 0:
            path = os.path.join(args.out, f"ckpt-{step:06d}.pt")
            save(path, model, opt, step)
            files.append(path)
    return {"files": files}


def tensor_bytes(t):
    return t.numel() * t.element_size()


def cmd_finetune(args):
    """A frozen backbone with a trainable head: consecutive checkpoints share
    every backbone tensor byte for byte. Reports how many bytes of step 30's
    tensors are identical to step 20's: the bytes that really repeat."""
    model = make_model(width=args.width, depth=6)
    for p in list(model.parameters())[:-2]:
        p.requires_grad_(False)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    train_steps(model, opt, 20)
    os.makedirs(os.path.join(args.out, "a"), exist_ok=True)
    os.makedirs(os.path.join(args.out, "b"), exist_ok=True)
    a = os.path.join(args.out, "a", "ckpt_000020.pt")
    save(a, model, opt, 20)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    train_steps(model, opt, 10, seed=2)
    b = os.path.join(args.out, "b", "ckpt_000030.pt")
    save(b, model, opt, 30)
    repeated = sum(tensor_bytes(v) for k, v in model.state_dict().items()
                   if torch.equal(v, before[k]))
    return {"a": a, "b": b, "size_b": os.path.getsize(b), "repeated_bytes": repeated}


def cmd_ranks(args):
    model = make_model(width=args.width)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    train_steps(model, opt, 3)
    os.makedirs(args.out, exist_ok=True)
    paths = [os.path.join(args.out, f"rank{r}.pt") for r in range(2)]
    for p in paths:
        save(p, model, opt, 3)
    return {"files": paths, "size": os.path.getsize(paths[0])}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("cmd", choices=["train", "finetune", "ranks"])
    ap.add_argument("out")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--every", type=int, default=2)
    ap.add_argument("--width", type=int, default=512)
    args = ap.parse_args()
    torch.set_num_threads(1)
    result = {"train": cmd_train, "finetune": cmd_finetune, "ranks": cmd_ranks}[args.cmd](args)
    json.dump(result, sys.stdout)
    print()


if __name__ == "__main__":
    main()
