"""The training pattern a user already has: save_ckpt() writes
ckpt-{step:06d}.pt every K steps, load_latest() takes the last file in
sorted order. Used by the mount tests to play a preempted node.

    train_resume.py CKPT_DIR REF_DIR --until N --every K

Resumes from the latest checkpoint in CKPT_DIR if there is one, trains to
step N, saving every K steps into CKPT_DIR and the same bytes' state into
REF_DIR (a local-disk reference the test compares with). Prints one JSON
line: {"resumed_from": step or 0, "saved": [steps], "final_step": N}.
"""
import argparse
import glob
import json
import os

import torch


def make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))


def save_ckpt(path, model, opt, step):
    torch.save({"step": step, "model": model.state_dict(), "optimizer": opt.state_dict()},
               os.path.join(path, f"ckpt-{step:06d}.pt"))


def load_latest(path, model, opt):
    files = sorted(glob.glob(os.path.join(path, "ckpt-*.pt")))
    if not files:
        return 0
    state = torch.load(files[-1])
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["optimizer"])
    return state["step"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ckpt_dir")
    ap.add_argument("ref_dir")
    ap.add_argument("--until", type=int, required=True)
    ap.add_argument("--every", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(1)
    os.makedirs(args.ckpt_dir, exist_ok=True)
    os.makedirs(args.ref_dir, exist_ok=True)
    model = make_model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    start = load_latest(args.ckpt_dir, model, opt)
    saved = []
    for step in range(start + 1, args.until + 1):
        g = torch.Generator().manual_seed(step)
        x = torch.randn(64, 256, generator=g)
        y = torch.randint(0, 10, (64,), generator=g)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % args.every == 0:
            save_ckpt(args.ckpt_dir, model, opt, step)
            save_ckpt(args.ref_dir, model, opt, step)
            saved.append(step)
    print(json.dumps({"resumed_from": start, "saved": saved, "final_step": args.until}))


if __name__ == "__main__":
    main()
