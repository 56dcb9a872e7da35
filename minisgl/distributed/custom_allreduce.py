"""Small all-reduces over NVLink without NCCL: PyTorch's symmetric memory (CUDA IPC buffers that
every rank maps), whose one-shot kernel reads all peers' copies and sums them in one launch and
whose two-shot kernel reduce-scatters then all-gathers. A decode step's all-reduces carry a few
KiB to a few MiB, where NCCL's fixed latency per call dominates (benchmark/NOTES.md has the
figures); these kernels take a fraction of it there. Above `TWO_SHOT_MAX_BYTES` NCCL is used.

Both kernels synchronise with the peers through signal pads on the device, at the start and the
end, so one staging buffer serves every call in stream order and the calls are captured in CUDA
graphs. No NVLink multicast: only peer loads and stores (PyTorch's multimem kernels are not used,
so this runs with TORCH_SYMM_MEM_DISABLE_MULTICAST=1 / NCCL_NVLS_ENABLE=0).

Imported lazily, on CUDA with tensor parallelism only; `--disable-custom-all-reduce` keeps NCCL.
"""

from __future__ import annotations

import warnings

import torch
import torch.distributed as dist

from minisgl.utils.logger import get_logger

logger = get_logger(__name__)

# Message sizes by which one-shot, two-shot and NCCL are chosen; measured on an H200 pair by
# benchmark/offline/allreduce.py (see benchmark/NOTES.md).
ONE_SHOT_MAX_BYTES = 1 << 20  # one-shot measured faster up to 1 MiB on H200 x2 (benchmark/NOTES.md)
TWO_SHOT_MAX_BYTES = 8 << 20
WORLD_SIZES = (2, 4, 8)  # the sizes PyTorch's two-shot kernel is built for


class SymmMemAllReduce:
    def __init__(self, group: dist.ProcessGroup, device: torch.device, max_bytes: int = TWO_SHOT_MAX_BYTES,
                 one_shot_max_bytes: int = ONE_SHOT_MAX_BYTES):
        import torch.distributed._symmetric_memory as symm_mem

        self.group_name = group.group_name
        self.max_bytes = max_bytes
        self.one_shot_max_bytes = one_shot_max_bytes
        with warnings.catch_warnings():  # needed before PyTorch 2.8 or so, deprecated (a no-op) after
            warnings.simplefilter("ignore", FutureWarning)
            symm_mem.enable_symm_mem_for_group(self.group_name)
        self.buffer = symm_mem.empty(max_bytes, dtype=torch.uint8, device=device)
        symm_mem.rendezvous(self.buffer, self.group_name)  # collective: every rank maps every buffer

    def takes(self, x: torch.Tensor) -> bool:
        nbytes = x.numel() * x.element_size()
        return (x.dtype in (torch.bfloat16, torch.float16, torch.float32) and x.is_contiguous()
                and 0 < nbytes <= self.max_bytes and nbytes % 16 == 0)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """Sum x over the ranks, in place (x must pass `takes`)."""
        if x.numel() * x.element_size() <= self.one_shot_max_bytes:
            return self.one_shot(x)
        return self.two_shot(x)

    def one_shot(self, x: torch.Tensor) -> torch.Tensor:
        """One launch: x is copied into this rank's buffer, then every rank sums all buffers into x."""
        flat = x.view(-1)
        staging = self.buffer.view(x.dtype)[: flat.numel()]
        torch.ops.symm_mem.one_shot_all_reduce_copy_out(staging, flat, "sum", self.group_name, flat)
        return x

    def two_shot(self, x: torch.Tensor) -> torch.Tensor:
        """Each rank sums its 1/world slice of all buffers, then gathers the others' sums into x:
        less traffic per rank than one-shot for larger messages."""
        flat = x.view(-1)
        staging = self.buffer.view(x.dtype)[: flat.numel()]
        staging.copy_(flat)
        torch.ops.symm_mem.two_shot_all_reduce_out(staging, "sum", self.group_name, flat)
        return x


def create(group: dist.ProcessGroup, device: torch.device, max_bytes: int = TWO_SHOT_MAX_BYTES
           ) -> SymmMemAllReduce | None:
    """The custom all-reduce for `group`, or None (with the reason logged) where it cannot run:
    a world size the kernels lack, GPUs without peer access, or a PyTorch without the ops. Every
    rank reaches the same answer before the collective rendezvous."""
    world = dist.get_world_size(group)
    if world not in WORLD_SIZES:
        logger.info("custom all-reduce off: no kernels for %d ranks; NCCL for all sizes", world)
        return None
    count = torch.cuda.device_count()
    local = list(range(count))[:world] if count >= world else []
    if not local or not all(torch.cuda.can_device_access_peer(a, b) for a in local for b in local if a != b):
        logger.info("custom all-reduce off: the GPUs have no peer access; NCCL for all sizes")
        return None
    # `from ... import`: a plain `import torch.x` here would make `torch` local to this function.
    from torch.distributed import _symmetric_memory  # noqa: F401  (loads the symm_mem ops)

    if not all(hasattr(torch.ops.symm_mem, op) for op in ("one_shot_all_reduce_copy_out", "two_shot_all_reduce_out")):
        logger.info("custom all-reduce off: this PyTorch (%s) lacks symmetric-memory all-reduce", torch.__version__)
        return None
    try:
        custom = SymmMemAllReduce(group, device, max_bytes)
        _probe(custom, dist.get_rank(group), world, device)
    except Exception as e:  # e.g. CUDA IPC handles that cannot be shared on this machine
        logger.warning("custom all-reduce off: symmetric memory failed here (%s); NCCL for all sizes", e)
        custom = None
    # All ranks use it or none does: a rank on NCCL would wait forever for one on symmetric memory.
    agreed = torch.tensor([custom is not None], dtype=torch.int32, device=device)
    dist.all_reduce(agreed, op=dist.ReduceOp.MIN, group=group)
    if not agreed.item():
        return None
    logger.info("custom all-reduce: symmetric memory, one-shot up to %d KiB, two-shot up to %d MiB, NCCL above",
                custom.one_shot_max_bytes >> 10, custom.max_bytes >> 20)
    return custom


def _probe(custom: SymmMemAllReduce, rank: int, world: int, device: torch.device) -> None:
    """Both kernels sum a known tensor right, or the custom all-reduce is not used."""
    want = world * (world + 1) / 2
    for method in (custom.one_shot, custom.two_shot):
        x = torch.full((4, 256), float(rank + 1), device=device)
        if not torch.all(method(x) == want):
            raise RuntimeError(f"{method.__name__} summed {x.flatten()[0].item()}, not {want}")
