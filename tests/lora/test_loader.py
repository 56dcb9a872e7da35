"""Adapter loads under tensor parallelism (gloo, 2 ranks): each rank reads its own shards off its
loop, and every rank installs the adapter in the same slot in the same step, so requests running
beside the load, and the requests for it afterwards, give peft's tokens; a load refused on the
ranks answers with the reason and leaves the slot free for the next, which serves peft's tokens
too."""

from __future__ import annotations

import pytest
import torch

from minisgl.core.params import SamplingParams
from minisgl.llm import LLM
from minisgl.message import LoraUpdateMsg, TokenizedRequestMsg
from minisgl.scheduler.process import LocalInbox, SchedulerServer
from tests.lora.peft_adapters import build_adapter, peft_greedy

PROMPTS = [[5, 17, 42, 99, 3], list(range(10, 37)), [300, 301, 302]]
NEW_TOKENS = 8


def greedy(lora: str | None = None) -> SamplingParams:
    return SamplingParams(temperature=0, max_tokens=NEW_TOKENS, ignore_eos=True, lora=lora)


class Ranks:
    """Rank 0's loop of an LLM with tp=2, fed message by message (the other rank follows it)."""

    def __init__(self, llm: LLM):
        self.inbox = LocalInbox()
        self.outputs = []
        self.server = SchedulerServer(llm.scheduler, self.inbox, self.outputs.extend)

    def send(self, *msgs) -> None:
        for msg in msgs:
            self.inbox.put(msg)

    def until_finished(self, *uids: int) -> dict[int, tuple[str, str | None]]:
        while any(self.finish(u) is None for u in uids):
            self.server.run_once()
        return {u: self.finish(u) for u in uids}

    def finish(self, uid: int) -> tuple[str, str | None] | None:
        return next(((o.finish_reason, o.error) for o in self.outputs if o.uid == uid and o.finish_reason), None)

    def tokens(self, uid: int) -> list[int]:
        return [o.token_id for o in self.outputs if o.uid == uid and o.token_id is not None]


@pytest.mark.slow
def test_every_rank_installs_the_adapter_in_the_same_step_and_slot(lora_model_dir, lora_adapters, tmp_path):
    llm = LLM(lora_model_dir, tp=2, device="cpu", dtype=torch.float32, page_size=4, num_pages=256, max_prefill_length=16,
              lora_modules={"r4": lora_adapters["r4"]}, max_loras=2)
    try:
        ranks = Ranks(llm)
        # Requests of r4 and the base model run while r8 loads.
        ranks.send(TokenizedRequestMsg(0, PROMPTS[0], greedy("r4")), LoraUpdateMsg(1, "r8", lora_adapters["r8"]),
                   TokenizedRequestMsg(2, PROMPTS[1], greedy()))
        assert ranks.until_finished(1) == {1: ("stop", None)}
        ranks.send(TokenizedRequestMsg(3, PROMPTS[2], greedy("r8")), TokenizedRequestMsg(4, PROMPTS[1], greedy("r8")))
        assert set(ranks.until_finished(0, 2, 3, 4).values()) == {("length", None)}
        expected = {0: (PROMPTS[0], "r4"), 2: (PROMPTS[1], None), 3: (PROMPTS[2], "r8"), 4: (PROMPTS[1], "r8")}
        for uid, (prompt, name) in expected.items():
            assert ranks.tokens(uid) == peft_greedy(lora_model_dir, lora_adapters.get(name), prompt, NEW_TOKENS), (uid, name)

        big = build_adapter(lora_model_dir, str(tmp_path / "big"), 32, 32)
        ranks.send(LoraUpdateMsg(5, "r8", None), LoraUpdateMsg(6, "big", big))
        finished = ranks.until_finished(5, 6)
        assert finished[5] == ("stop", None)
        assert finished[6][0] == "error" and "rank 32 exceeds max_lora_rank 16" in finished[6][1]
        # The slot r8 left, which the refused load held meanwhile, takes r16 on both ranks.
        ranks.send(LoraUpdateMsg(7, "r16", lora_adapters["r16"]))
        assert ranks.until_finished(7) == {7: ("stop", None)}
        ranks.send(TokenizedRequestMsg(8, PROMPTS[0], greedy("r16")), TokenizedRequestMsg(9, PROMPTS[2], greedy("r4")))
        assert set(ranks.until_finished(8, 9).values()) == {("length", None)}
        assert ranks.tokens(8) == peft_greedy(lora_model_dir, lora_adapters["r16"], PROMPTS[0], NEW_TOKENS)
        assert ranks.tokens(9) == peft_greedy(lora_model_dir, lora_adapters["r4"], PROMPTS[2], NEW_TOKENS)
        assert llm.scheduler.engine.lora.slot("r16") == 2
    finally:
        llm.shutdown()
