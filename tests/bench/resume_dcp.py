"""One rank of a 4-rank PyTorch Distributed Checkpoint (torch 1.13's
torch.distributed._shard.checkpoint, gloo, CPU) for bench_resume.sh; run by
torchrun.

    resume_dcp.py save DIR MIB   every rank writes its row shard of a
                                 MIB-MiB fp32 tensor (seeded) to DIR
    resume_dcp.py load DIR MIB   every rank loads its shard back from DIR
                                 and checks it equals what save wrote

single_file_per_rank: rank R writes DIR/__R_0.distcp, rank 0 .metadata.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
import mn_torchcompat  # noqa: E402

mn_torchcompat.install()

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.distributed._shard.checkpoint as dcp  # noqa: E402
from torch.distributed._shard.sharded_tensor import Shard, init_from_local_shards  # noqa: E402

COLS = 4096


def shard(rows, rank, world, fill):
    per = rows // world
    local = torch.empty(per, COLS)
    if fill:
        local.copy_(torch.randn(per, COLS, generator=torch.Generator().manual_seed(rank)))
    return init_from_local_shards([Shard.from_tensor_and_offsets(local, [rank * per, 0], rank)],
                                  [rows, COLS]), local


def main():
    mode, path, mib = sys.argv[1], sys.argv[2], int(sys.argv[3])
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    rows = max(world, (mib << 20) // (4 * COLS) // world * world)
    st, local = shard(rows, rank, world, mode == "save")
    state = {"weight": st}
    if mode == "save":
        os.makedirs(path, exist_ok=True)
        dcp.save_state_dict(state_dict=state,
                            storage_writer=dcp.FileSystemWriter(path, single_file_per_rank=True))
    else:
        dcp.load_state_dict(state_dict=state, storage_reader=dcp.FileSystemReader(path))
        want = torch.randn(rows // world, COLS, generator=torch.Generator().manual_seed(rank))
        if not torch.equal(local, want):
            sys.exit("rank %d: the loaded shard differs from the saved one" % rank)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
