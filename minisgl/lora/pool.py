"""The adapter pool: fixed LoRA weight buffers sized at start (max_loras slots plus slot 0, the base
model, at max_lora_rank), attached to the model's q/k/v/o and gate/up/down linears, and which
adapter holds which slot.

Each forward pass sets the slot mask of its tokens (`prepare` on the host's slot list; in a CUDA
graph, `graph_mask` from a static buffer of slot ids), which every LoRA layer reads.
An adapter is unloaded only when no request uses it (`acquire`/`release` count them).

A load has three parts, so that the slow one can run off the scheduler's loop (lora.loader):
`reserve` holds a free slot for the name, `read` reads, checks and shards the adapter on the host
(touching no slot), and `install` copies it into the reserved slot between two steps.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from minisgl.distributed import DistributedInfo
from minisgl.models import ModelConfig

from .adapter import TARGET_MODULES, LoraAdapter, load_adapter
from .linear import LoraBatchState, LoraLinear


@dataclass
class ReadAdapter:
    """An adapter read and checked, cut to this rank's shards in the pool's dtype on the host (B
    already scaled): (its LoraLinear, sub-projection, A, B) per target, what `install` copies."""

    adapter: LoraAdapter
    writes: list[tuple[LoraLinear, int, torch.Tensor, torch.Tensor]]


class LoraPool:
    def __init__(self, model: nn.Module, cfg: ModelConfig, max_loras: int, max_rank: int, tp: DistributedInfo,
                 dtype: torch.dtype, device: torch.device):
        if max_loras < 1 or max_rank < 1:
            raise ValueError(f"max_loras and max_lora_rank must be >= 1, got {max_loras} and {max_rank}")
        self.cfg, self.max_loras, self.max_rank, self.tp = cfg, max_loras, max_rank, tp
        self.slots = max_loras + 1
        self.dtype, self.device = dtype, device
        self.state = LoraBatchState()
        self.slot_ids = torch.arange(self.slots, device=device)
        # (layer, PEFT module) -> (its LoraLinear, sub-projection index); the linear itself.
        self.targets: dict[tuple[int, str], tuple[LoraLinear, int, nn.Module]] = {}
        for i, layer in enumerate(model.model.layers):
            self._attach(i, layer)
        self.names: dict[str, int] = {}  # adapter name -> slot
        self.reserved: dict[str, int] = {}  # adapter name -> slot, for loads in flight
        self.adapters: list[LoraAdapter | None] = [None] * self.slots
        self.users = [0] * self.slots
        # A number per load, never reused: the prefix cache's namespace for the adapter's KV.
        self.load_ids = [0] * self.slots
        self._next_id = itertools.count(1)
        self.graph_slots: torch.Tensor | None = None

    def _attach(self, index: int, layer: nn.Module) -> None:
        by_linear: dict[str, list[str]] = {}
        for module, (path, _) in TARGET_MODULES.items():
            by_linear.setdefault(path, []).append(module)
        for path, modules in by_linear.items():
            try:
                linear = layer.get_submodule(path)
            except AttributeError:
                continue  # an MoE layer has no gate/up/down linears
            if hasattr(linear, "local_in"):  # row-parallel: the input is split, the output whole
                subs = [(0, linear.weight.shape[0])]
                in_features = linear.local_in
            else:
                subs = [linear.shard_offsets(TARGET_MODULES[m][1])[:2] for m in modules]
                in_features = linear.weight.shape[1]
            lora = LoraLinear(in_features, subs, self.slots, self.max_rank, self.state, self.dtype, self.device)
            linear.lora = lora
            for sub, module in enumerate(modules):
                self.targets[(index, module)] = (lora, sub, linear)

    # -- adapters -----------------------------------------------------------------------------

    def load(self, name: str, path: str) -> int:
        """Reserve, read and install at once (the adapters named at start, before serving): the
        adapter's slot. A ValueError with the reason when it cannot be served (see lora.adapter) or no
        slot is free."""
        self.reserve(name)
        try:
            read = self.read(name, path)
        except BaseException:
            self.unreserve(name)
            raise
        return self.install(name, read)

    def reserve(self, name: str) -> int:
        """Hold a free slot for `name` until `install` or `unreserve`: a ValueError when the name is
        loaded or loading already, or every slot is taken."""
        if name in self.names:
            raise ValueError(f"LoRA adapter {name!r} is already loaded")
        if name in self.reserved:
            raise ValueError(f"LoRA adapter {name!r} is already being loaded")
        held = set(self.reserved.values())
        free = next((s for s in range(1, self.slots) if self.adapters[s] is None and s not in held), None)
        if free is None:
            raise ValueError(f"cannot load LoRA adapter {name!r}: all {self.max_loras} slots are taken (--max-loras)")
        self.reserved[name] = free
        return free

    def unreserve(self, name: str) -> None:
        self.reserved.pop(name, None)

    def read(self, name: str, path: str) -> ReadAdapter:
        """Read and check the adapter and cut this rank's shards. It reads only what is fixed at start
        (the targets, the sharding, the dtype), so it may run in another thread while the loop serves."""
        adapter = load_adapter(name, path, self.cfg, self.max_rank)
        writes = []
        for key, (a, b, scaling) in adapter.weights.items():
            lora, sub, linear = self.targets[key]
            a, b = self._shard(linear, key[1], a, b)
            writes.append((lora, sub, self._staged(a.to(self.dtype)), self._staged((b.float() * scaling).to(self.dtype))))
        return ReadAdapter(adapter, writes)

    def _staged(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        # In pinned memory the copy into the slot is an asynchronous DMA: `install` does not wait for
        # the forward pass in flight.
        return x.pin_memory() if self.device.type == "cuda" else x

    def install(self, name: str, read: ReadAdapter) -> int:
        """Copy a read adapter into the slot reserved for it (a few device copies, between two steps:
        no request uses a reserved slot); its slot."""
        slot = self.reserved.pop(name)
        for lora, sub, a, b in read.writes:
            lora.write(slot, sub, a, b)
        self.adapters[slot], self.names[name] = read.adapter, slot
        self.load_ids[slot] = next(self._next_id)
        return slot

    def _shard(self, linear: nn.Module, module: str, a: torch.Tensor, b: torch.Tensor):
        """This rank's A and B, split as the base linear is."""
        if hasattr(linear, "local_in"):
            return a.narrow(1, self.tp.rank * linear.local_in, linear.local_in), b
        _, rows, start = linear.shard_offsets(TARGET_MODULES[module][1])
        return a, b.narrow(0, start, rows)

    def unload(self, name: str) -> None:
        """Free the adapter's slot; a ValueError while requests use it (never pulled from under them)."""
        slot = self.slot(name)
        if self.users[slot]:
            raise ValueError(f"LoRA adapter {name!r} is in use by {self.users[slot]} request(s)")
        for lora in {id(t[0]): t[0] for t in self.targets.values()}.values():
            lora.clear(slot)
        del self.names[name]
        self.adapters[slot], self.load_ids[slot] = None, 0

    def slot(self, name: str) -> int:
        if name not in self.names:
            raise KeyError(name)
        return self.names[name]

    def acquire(self, name: str) -> tuple[int, int]:
        """A request will use the adapter: (its slot, its load id)."""
        slot = self.slot(name)
        self.users[slot] += 1
        return slot, self.load_ids[slot]

    def release(self, slot: int) -> None:
        if slot:
            self.users[slot] -= 1

    # -- forward passes -----------------------------------------------------------------------

    def prepare(self, slots: list[int], extend_lens: np.ndarray) -> None:
        """Each request's slot and token count, in batch order: what this eager pass's LoRA layers
        read (minisgl.lora.linear.LoraBatchState)."""
        if not any(slots):
            self.state.mask = None
            return
        per_token = torch.from_numpy(np.repeat(np.asarray(slots, dtype=np.int64), extend_lens)).to(self.device)
        self.state.mask = (per_token[:, None] == self.slot_ids).to(self.dtype)

    def graph_buffers(self, max_bs: int) -> None:
        """Static buffers for CUDA graphs: the slot of each padded decode row, copied in before a
        replay, and the mask the graph computes from it."""
        self.graph_slots = torch.zeros(max_bs, dtype=torch.int64, device=self.device)
        self.graph_mask_buf = torch.zeros(max_bs, self.slots, dtype=self.dtype, device=self.device)

    def graph_mask(self, bs: int) -> None:
        """Inside the graph: the mask of its bs rows, from graph_slots."""
        mask = self.graph_mask_buf[:bs]
        mask.copy_(self.graph_slots[:bs, None] == self.slot_ids)
        self.state.mask = mask
