"""A server whose engine runs no model, for measuring the serving path alone (benchmark support,
outside the package: bench.py --model-free runs it).

`ModelFreeEngine` is the real Engine (page table, token pool, KV pool sized as usual) with the
forward pass replaced by drawing random token ids, so every other part runs for real: the API
process, the tokenizer and detokenizer workers, ZMQ and msgpack, and the scheduler's host side
(batching, prefix cache, pages). It decodes as fast as the host allows, or one step per
`MINISGL_MODEL_FREE_STEP_MS` to mimic a GPU's step time. It is reachable only through this
script, never through the server's flags:

    python benchmark/online/model_free.py [server flags]      # e.g. --port 1919

The server takes no hook for it: this script swaps the scheduler process's entry point in the
launcher (a spawned child unpickles it from here) and, in that process, the Engine.
"""

from __future__ import annotations

import sys
import time

import torch

from minisgl.engine.engine import Engine, ForwardOutput, _DoneEvent
from minisgl.utils import env
from minisgl.utils.logger import get_logger

logger = get_logger(__name__)


class ModelFreeEngine(Engine):
    """Samples uniformly random tokens (never an end-of-sequence token) instead of running the model."""

    def __init__(self, config) -> None:
        super().__init__(config)
        eos = set(self.model_config.eos_token_ids)
        self.allowed = torch.tensor([t for t in range(self.model_config.vocab_size) if t not in eos], dtype=torch.int32)
        self.generator = torch.Generator().manual_seed(0)
        self.step_s = float(env.MODEL_FREE_STEP_MS.get()) / 1000.0
        logger.warning("BENCHMARK ENGINE: no model runs; tokens are random (step time %.1f ms)", self.step_s * 1000)

    @torch.inference_mode()
    def forward_batch(self, batch, args) -> ForwardOutput:
        start = time.perf_counter()
        if callable(args):
            args()  # the scheduler's work before sampling (Engine.forward_batch)
        picks = torch.randint(len(self.allowed), (len(batch.reqs),), generator=self.generator)
        tokens = self.allowed[picks]
        self._store_next_tokens(tokens, *self._next_token_slots(batch), None)
        left = self.step_s - (time.perf_counter() - start)
        if left > 0:
            time.sleep(left)
        return ForwardOutput(tokens, tokens.clone(), _DoneEvent())


def model_free_scheduler_main(*args) -> None:
    """The scheduler process's entry point (workers._scheduler_main), its Engine a ModelFreeEngine.
    The launcher starts the scheduler by spawning this function, which a spawned child unpickles
    from this script; the child imports the scheduler itself, so the swap happens here, in it."""
    import minisgl.scheduler.scheduler
    from minisgl.server.runtime.workers import _scheduler_main

    minisgl.scheduler.scheduler.Engine = ModelFreeEngine
    _scheduler_main(*args)


def main(argv: list[str] | None = None) -> int:
    import minisgl.server.runtime.workers
    from minisgl.server.args import parse_args
    from minisgl.server.launch import serve

    args = parse_args(argv)
    if args.device == "cuda" or args.tp != 1:
        print("model_free.py: error: runs on the CPU with --tp 1 only", file=sys.stderr)
        return 2
    args = type(args)(**{**args.__dict__, "device": "cpu"})
    minisgl.server.runtime.workers._scheduler_main = model_free_scheduler_main
    return serve(args)


if __name__ == "__main__":
    sys.exit(main())
