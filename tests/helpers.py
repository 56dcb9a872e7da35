"""Test-side utilities: HF transformers as the reference, and a minimal driver for the Engine."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import torch
from transformers import AutoModelForCausalLM

from minisgl.core.batch import Batch, Req
from minisgl.core.params import SamplingParams
from minisgl.engine import BatchSamplingArgs, Engine, EngineConfig


def hf_greedy(model_dir: str, prompt: list[int], new_tokens: int, dtype=torch.float32):
    """HF transformers' greedy continuation of one prompt and the logits of each step."""
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype)
    out = model.generate(torch.tensor([prompt]), max_new_tokens=new_tokens, do_sample=False,
                         output_logits=True, return_dict_in_generate=True, pad_token_id=0,
                         eos_token_id=None, attention_mask=torch.ones(1, len(prompt), dtype=torch.long))
    tokens = out.sequences[0, len(prompt):].tolist()
    logits = torch.stack([step[0].float() for step in out.logits])
    return tokens, logits


@contextmanager
def cpu_engine(model_dir: str, **config) -> Iterator[Engine]:
    """An Engine of `model_dir` on the CPU in float32 (unless `config` says otherwise), shut down
    on every exit path."""
    engine = Engine(EngineConfig(model_dir, **{"device": "cpu", "dtype": torch.float32, **config}))
    try:
        yield engine
    finally:
        engine.shutdown()


class EngineDriver:
    """Runs requests through an Engine by hand: each request gets a page-table row and enough
    contiguous pages for its whole length; the scheduler does this properly."""

    def __init__(self, engine: Engine):
        self.engine = engine
        self.next_page = 0
        self.next_row = 0

    def add(self, prompt: list[int], params: SamplingParams | None = None, max_len: int | None = None) -> Req:
        e = self.engine
        params = params or SamplingParams(temperature=0.0)
        req = Req(uid=self.next_row, prompt_ids=list(prompt), sampling_params=params, table_idx=self.next_row)
        self.next_row += 1
        length = max_len or len(prompt) + params.max_tokens
        pages = -(-length // e.page_size)
        slots = (torch.arange(self.next_page, self.next_page + pages).repeat_interleave(e.page_size) * e.page_size
                 + torch.arange(e.page_size).repeat(pages))
        self.next_page += pages
        e.page_table[req.table_idx, : pages * e.page_size] = slots.to(torch.int32)
        fits = prompt[: e.token_pool.shape[1]]  # an over-long prompt is the engine's to reject
        e.token_pool[req.table_idx, : len(fits)] = torch.tensor(fits, dtype=torch.int32)
        return req

    def step(self, reqs: list[Req], chunk: int | None = None) -> torch.Tensor:
        """One forward pass: unfinished prompts advance by up to `chunk` tokens, others decode."""
        for r in reqs:
            remaining = r.seq_len - r.cached_len
            r.device_len = r.cached_len + (min(remaining, chunk) if chunk else remaining)
        phase = "decode" if all(r.extend_len == 1 for r in reqs) else "prefill"
        batch = Batch(reqs=reqs, phase=phase)
        out = self.engine.forward_batch(batch, BatchSamplingArgs.from_reqs(reqs, self.engine.device))
        out.copy_done_event.synchronize()
        for i, r in enumerate(reqs):
            r.cached_len = r.device_len
            if r.samples_this_step:
                r.seq_len += 1
                r.output_ids.append(int(out.next_tokens_cpu[i]))
        return batch.logits


def refused_flags(argv: list[str], capsys) -> str:
    """What the server prints on stderr when its flag parsing refuses `argv` (exit status 2, checked)."""
    from minisgl.server.args import parse_args

    with pytest.raises(SystemExit) as exited:
        parse_args(argv)
    stderr = capsys.readouterr().err
    assert exited.value.code == 2, stderr
    return stderr
