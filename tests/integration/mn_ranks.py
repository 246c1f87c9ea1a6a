"""One rank of a small data-parallel training job that checkpoints every step,
for tests/integration/test_multinode.py. Launched by torchrun (gloo, CPU), so
RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT are in the environment (the
ckptfs daemon reads RANK and WORLD_SIZE from /proc/PID/environ).

    mn_ranks.py --layout dcp|deepspeed --dirs JOBDIR0,JOBDIR1,... --ref REFDIR
                --first A --last B

--dirs: one job directory per node; rank r writes through
dirs[r * len(dirs) // WORLD_SIZE] (4 ranks, 2 dirs: ranks 0,1 -> node A,
ranks 2,3 -> node B). Every rank writes the same relative names, so the
union of the nodes' parts in the store is the whole checkpoint.

--ref: a local directory (not a mount) where every rank writes the same
files again with the same names, as the reference for bit-exact checks.

Layouts, per step N:
* dcp: torch.distributed._shard.checkpoint.save_state_dict with
  FileSystemWriter(JOBDIR/step-%06d, single_file_per_rank=True): a
  ShardedTensor of the weights split by rows over the ranks, so every rank
  writes its own `__R_0.distcp` (then fsync) and rank 0 then writes
  `.metadata.tmp`, fsyncs it and renames it to `.metadata` (the collective
  ensures rank 0 does that only after every rank's shard is written).
  Each rank creates the step directory in its own node's view first (1.13's
  FileSystemWriter only mkdirs on the coordinator, and rank 0's directory
  is on another mount).
* deepspeed: every rank torch.saves global_stepN/zero_pp_rank_R_mp_rank_00_optim_states.pt,
  rank 0 also global_stepN/mp_rank_00_model_states.pt; barrier; rank 0
  writes `latest` (content "global_stepN") at the job root, as
  DeepSpeed's save_checkpoint does.

Prints one JSON line per rank at the end: {"rank": R, "steps": [...]}.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mn_torchcompat  # noqa: E402

mn_torchcompat.install()

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

ROWS, COLS = 512, 256  # 512 KiB of fp32 weights; 128 rows per rank with 4 ranks


def dcp_save(state, path):
    import torch.distributed._shard.checkpoint as dcp
    os.makedirs(path, exist_ok=True)
    dcp.save_state_dict(state_dict=state,
                        storage_writer=dcp.FileSystemWriter(path, single_file_per_rank=True))


def sharded_state(weight, momentum, step, rank, world):
    from torch.distributed._shard.sharded_tensor import Shard, init_from_local_shards
    rows = ROWS // world
    lo = rank * rows

    def st(full):
        local = full[lo:lo + rows].clone()
        return init_from_local_shards(
            [Shard.from_tensor_and_offsets(local, [lo, 0], rank)], [ROWS, COLS])
    return {"weight": st(weight), "momentum": st(momentum), "step": step}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layout", choices=("dcp", "deepspeed"), required=True)
    ap.add_argument("--dirs", required=True)
    ap.add_argument("--ref", required=True)
    ap.add_argument("--first", type=int, default=1)
    ap.add_argument("--last", type=int, required=True)
    a = ap.parse_args()

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    assert os.environ.get("RANK") == str(rank), "RANK must be in the environment"
    dirs = a.dirs.split(",")
    mine = dirs[rank * len(dirs) // world]

    # Data-parallel training of one linear layer: same seed everywhere, each
    # rank its own batch, gradients all-reduced, so all ranks hold the same
    # weights (as DDP would); the checkpoint shards them by rows.
    torch.manual_seed(0)
    weight = torch.randn(ROWS, COLS) * 0.02
    momentum = torch.zeros(ROWS, COLS)
    gen = torch.Generator().manual_seed(1000 + rank)
    saved = []
    for step in range(1, a.last + 1):
        x = torch.randn(16, COLS, generator=gen)
        y = torch.randn(16, ROWS, generator=gen)
        grad = 2 * (x @ weight.t() - y).t() @ x / x.shape[0]
        dist.all_reduce(grad)
        grad /= world
        momentum.mul_(0.9).add_(grad)
        weight.sub_(0.01 * momentum)
        if step < a.first:
            continue
        if a.layout == "dcp":
            name = "step-%06d" % step
            state = sharded_state(weight, momentum, step, rank, world)
            dcp_save(state, os.path.join(a.ref, name))
            dist.barrier()
            dcp_save(state, os.path.join(mine, name))
        else:
            name = "global_step%d" % step
            lo = rank * (ROWS // world)
            optim = {"optimizer_state_dict": {"momentum": momentum[lo:lo + ROWS // world].clone(),
                                              "step": step},
                     "ds_version": "0.0.0-test"}
            model = {"module": {"weight": weight.clone()}, "global_steps": step,
                     "dp_world_size": world}
            for root in (a.ref, mine):
                d = os.path.join(root, name)
                os.makedirs(d, exist_ok=True)
                torch.save(optim, os.path.join(d, "zero_pp_rank_%d_mp_rank_00_optim_states.pt" % rank))
                if rank == 0:
                    torch.save(model, os.path.join(d, "mp_rank_00_model_states.pt"))
            dist.barrier()
            if rank == 0:
                for root in (a.ref, mine):
                    with open(os.path.join(root, "latest"), "w") as f:
                        f.write(name)
        dist.barrier()
        saved.append(step)
    dist.barrier()
    print(json.dumps({"rank": rank, "steps": saved}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
