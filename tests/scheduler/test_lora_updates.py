"""LoRA adapters loaded while serving are read off the scheduler's loop: while an adapter's files
are being read (here its adapter_config.json is a named pipe the test writes only later), the
running requests decode to the end, a request naming it is refused as unknown, and neither an
unload nor a second load of it is taken; once read, the load is answered and the adapter serves
peft's tokens. A load refused in the background answers with the reason and gives its slot back."""

from __future__ import annotations

from minisgl.core.params import SamplingParams
from minisgl.scheduler import Scheduler
from tests.lora.peft_adapters import GatedAdapter, build_adapter, peft_greedy

PROMPT = [5, 17, 42, 99, 3, 250, 251]
NEW_TOKENS = 8


def greedy(lora: str | None = None) -> SamplingParams:
    return SamplingParams(temperature=0, max_tokens=NEW_TOKENS, ignore_eos=True, lora=lora)


class Outputs:
    """Every output the scheduler gave, by request."""

    def __init__(self, scheduler: Scheduler):
        self.scheduler = scheduler
        self.all = []

    def step(self) -> None:
        self.all += self.scheduler.step()

    def until_finished(self, uid: int) -> tuple[str, str | None]:
        while self.finish(uid) is None:
            self.step()
        return self.finish(uid)

    def finish(self, uid: int) -> tuple[str, str | None] | None:
        return next(((o.finish_reason, o.error) for o in self.all if o.uid == uid and o.finish_reason), None)

    def tokens(self, uid: int) -> list[int]:
        return [o.token_id for o in self.all if o.uid == uid and o.token_id is not None]


def test_requests_decode_while_an_adapter_is_read_and_then_it_serves_peft_tokens(lora_scheduler, lora_model_dir,
                                                                                 lora_adapters, tmp_path):
    gated = GatedAdapter(lora_adapters["r8"], str(tmp_path / "r8"))
    out = Outputs(lora_scheduler)
    try:
        lora_scheduler.update_lora(1, "r8", gated.path)
        while not gated.reader_blocked():
            out.step()
        # The load is blocked reading its config: requests of the base model and of r4 run to the end.
        lora_scheduler.add_request(2, PROMPT, greedy())
        lora_scheduler.add_request(3, PROMPT, greedy("r4"))
        assert out.until_finished(2) == ("length", None) and out.until_finished(3) == ("length", None)
        assert out.tokens(2) == peft_greedy(lora_model_dir, None, PROMPT, NEW_TOKENS)
        assert out.tokens(3) == peft_greedy(lora_model_dir, lora_adapters["r4"], PROMPT, NEW_TOKENS)
        assert out.finish(1) is None and gated.reader_blocked(), "the load finished without its config"

        lora_scheduler.add_request(4, PROMPT, greedy("r8"))
        assert out.until_finished(4) == ("error", "unknown LoRA adapter 'r8' (loaded: r4)")
        lora_scheduler.update_lora(5, "r8", None)
        assert out.until_finished(5) == ("error", "LoRA adapter 'r8' is still loading; unload it once its load "
                                                  "has finished")
        lora_scheduler.update_lora(6, "r8", lora_adapters["r8"])
        assert out.until_finished(6) == ("error", "LoRA adapter 'r8' is already being loaded")
        assert out.finish(1) is None

        gated.release()
        assert out.until_finished(1) == ("stop", None)
    finally:
        gated.close()
    lora_scheduler.add_request(7, PROMPT, greedy("r8"))
    assert out.until_finished(7) == ("length", None)
    assert out.tokens(7) == peft_greedy(lora_model_dir, lora_adapters["r8"], PROMPT, NEW_TOKENS)


def test_a_load_refused_in_the_background_answers_with_the_reason_and_gives_its_slot_back(
        lora_scheduler, tiny_model_dir, lora_model_dir, lora_adapters, tmp_path):
    corrupt = build_adapter(lora_model_dir, str(tmp_path / "corrupt"), 4, 8)
    with open(f"{corrupt}/adapter_model.safetensors", "wb") as f:
        f.write(b"not a safetensors file")
    refused = {
        build_adapter(lora_model_dir, str(tmp_path / "big"), 32, 32): "rank 32 exceeds max_lora_rank 16 (--max-lora-rank)",
        build_adapter(lora_model_dir, str(tmp_path / "head"), 4, 8, target_modules=["q_proj", "lm_head"]):
            "target modules lm_head are not supported",
        build_adapter(tiny_model_dir("Qwen3ForCausalLM", hidden_size=32), str(tmp_path / "other"), 4, 8):
            "(base-model mismatch)",
        str(tmp_path / "missing"): "adapter_config.json not found",
        corrupt: "cannot be read: ",
    }
    out = Outputs(lora_scheduler)
    for uid, (path, reason) in enumerate(refused.items()):
        lora_scheduler.update_lora(uid, "bad", path)
        finish, error = out.until_finished(uid)
        assert finish == "error" and error.startswith(f"LoRA adapter 'bad' ({path}): ") and reason in error
    # Each gave its slot back: the one free slot takes an adapter still.
    lora_scheduler.update_lora(10, "r8", lora_adapters["r8"])
    assert out.until_finished(10) == ("stop", None)
    assert lora_scheduler.engine.lora.slot("r8") == 2 and not lora_scheduler.engine.lora.reserved


def test_a_read_that_never_ends_is_abandoned_and_its_slot_given_back(lora_scheduler, lora_adapters, tmp_path):
    gated = GatedAdapter(lora_adapters["r8"], str(tmp_path / "hung"))  # never released: a hung filesystem
    lora_scheduler.lora_updates.loads.read_timeout_s = 0.5
    out = Outputs(lora_scheduler)
    try:
        lora_scheduler.update_lora(1, "hung", gated.path)
        while not gated.reader_blocked():
            out.step()
        assert out.until_finished(1) == ("error", f"LoRA adapter 'hung' ({gated.path}): not read within 0.5 s "
                                                  "(a hung filesystem?); the load is abandoned")
        # Its slot is free again, and the name too.
        lora_scheduler.update_lora(2, "r8", lora_adapters["r8"])
        assert out.until_finished(2) == ("stop", None)
        assert lora_scheduler.engine.lora.slot("r8") == 2 and not lora_scheduler.engine.lora.reserved
        lora_scheduler.add_request(3, PROMPT, greedy("hung"))
        assert out.until_finished(3) == ("error", "unknown LoRA adapter 'hung' (loaded: r4, r8)")
    finally:
        gated.close()  # the stuck read gets the end of its file and ends; what it read is dropped
