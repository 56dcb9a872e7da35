"""Speculative decoding changes how many tokens a step computes, never which: greedy and seeded
outputs, logprobs and every way a request ends are those of decoding without it, on every
architecture, with either drafter (n-gram, an EAGLE-3 head), with the radix cache and chunked
prefill on; and every page goes back."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
import torch

from minisgl.benchmark.replay_drafter import ReplayDrafter
from minisgl.core.params import SamplingParams
from minisgl.llm import LLM
from tests.conftest import ARCHITECTURES
from tests.speculative.eagle3_heads import TINY_TARGET, build_eagle3_head

NEW_TOKENS = 24
GREEDY = SamplingParams(temperature=0, max_tokens=NEW_TOKENS, ignore_eos=True)
# Radix cache and chunked prefill on, a prefill budget small enough to split the prompts.
SETTINGS = {"device": "cpu", "dtype": torch.float32, "max_running_requests": 16, "num_pages": 1024, "page_size": 4,
            "cache": "radix", "max_prefill_length": 16}


@pytest.fixture(scope="module")
def prompts():
    rng = random.Random(1)
    # Repeated fragments, so prompt lookup finds its n-grams.
    return [[rng.randint(3, 380) for _ in range(rng.randint(8, 20))] * 2 for _ in range(6)]


def generate(model_dir, prompts, params, speculative=None, replay=None, rate=1.0, draft_model=None, **settings):
    """The outputs and the scheduler after the run; `replay`: sequences a ReplayDrafter drafts from;
    `draft_model`: an EAGLE-3 head, drafting at every step (a random head's drafts are mostly wrong)."""
    kwargs = {**SETTINGS, **settings}
    if speculative or replay:
        kwargs["speculative"] = "ngram"
    if draft_model:
        kwargs.update(speculative="eagle3", draft_model=draft_model, speculative_min_acceptance=0.0)
    llm = LLM(model_dir, **kwargs)
    try:
        if replay is not None:
            vocab = llm.scheduler.engine.model_config.vocab_size
            llm.scheduler.speculator.drafter = ReplayDrafter(replay, rate, vocab)
        params = params if isinstance(params, list) else [params] * len(prompts)
        return llm.generate(prompts, params, use_tqdm=False), llm.scheduler
    finally:
        llm.shutdown()


def ids(outputs):
    return [o["token_ids"] for o in outputs]


def assert_all_pages_back(scheduler):
    assert scheduler.cache.used_pages == 0 and scheduler.cache.reserved == 0
    assert scheduler.table.num_free == scheduler.table.rows


def check_greedy(model_dir, prompts):
    expected, _ = generate(model_dir, prompts, GREEDY)
    sequences = [p + o for p, o in zip(prompts, ids(expected))]
    ngram, s_ngram = generate(model_dir, prompts, GREEDY, speculative="ngram")
    replayed, s_replay = generate(model_dir, prompts, GREEDY, replay=sequences, rate=0.7)
    assert ids(ngram) == ids(expected)
    assert ids(replayed) == ids(expected)
    # The replayed drafts were verified, most accepted, some rejected (their KV and pages dropped).
    stats = s_replay.stats
    assert 0 < stats.accepted_tokens < stats.draft_tokens
    assert s_ngram.stats.draft_tokens > 0
    assert_all_pages_back(s_ngram)
    assert_all_pages_back(s_replay)


def test_greedy_tokens_are_those_without_speculation(tiny_model_dir, prompts):
    check_greedy(tiny_model_dir("Qwen3ForCausalLM"), prompts)


@pytest.mark.slow  # three runs per architecture: tens of seconds on 2 cores
@pytest.mark.parametrize("arch", [a for a in ARCHITECTURES if a != "Qwen3ForCausalLM"])
def test_greedy_tokens_are_those_without_speculation_on_every_architecture(tiny_model_dir, prompts, arch):
    check_greedy(tiny_model_dir(arch), prompts)


def test_seeded_sampling_draws_the_same_tokens(tiny_model_dir, prompts):
    """Each verified position samples with the request's seed, penalties and min_tokens at that
    position, so a seeded request draws what it draws without speculation."""
    model_dir = tiny_model_dir("Qwen3ForCausalLM")
    params = [SamplingParams(temperature=0.9, top_k=50, seed=7 + i, max_tokens=NEW_TOKENS, min_tokens=20,
                             frequency_penalty=0.4, logprobs=3) for i in range(len(prompts))]
    expected, _ = generate(model_dir, prompts, params)
    sequences = [p + o for p, o in zip(prompts, ids(expected))]
    got, scheduler = generate(model_dir, prompts, params, replay=sequences, rate=0.8)
    assert ids(got) == ids(expected)
    assert scheduler.stats.accepted_tokens > 0
    for g, e in zip(got, expected):
        assert [[t for t, _ in x["top_logprobs"]] for x in g["logprobs"]] == \
            [[t for t, _ in x["top_logprobs"]] for x in e["logprobs"]]
        torch.testing.assert_close(torch.tensor([x["logprob"] for x in g["logprobs"]]),
                                   torch.tensor([x["logprob"] for x in e["logprobs"]]), rtol=1e-4, atol=1e-4)
    assert_all_pages_back(scheduler)


def test_a_request_ends_where_it_ends_without_speculation(tiny_model_dir, prompts):
    """A stop token inside the accepted drafts ends the request there; max_tokens is never passed."""
    model_dir = tiny_model_dir("Qwen3ForCausalLM")
    expected, _ = generate(model_dir, prompts, GREEDY)
    sequences = [p + o for p, o in zip(prompts, ids(expected))]
    stops = [replace(GREEDY, max_tokens=4 + 2 * i, stop_token_ids=(o[6],)) for i, o in enumerate(ids(expected))]
    want, _ = generate(model_dir, prompts, stops)
    got, scheduler = generate(model_dir, prompts, stops, replay=sequences, rate=1.0)
    assert ids(got) == ids(want)
    assert [o["finish_reason"] for o in got] == [o["finish_reason"] for o in want]
    assert {"stop", "length"} <= {o["finish_reason"] for o in got}
    assert all(len(o) <= p.max_tokens for o, p in zip(ids(got), stops))
    assert_all_pages_back(scheduler)


def test_a_small_pool_preempts_and_still_gives_the_same_tokens(tiny_model_dir, prompts):
    """Drafts take pages only where they fit (never a preemption of their own); requests the pool
    preempts resume as they do without speculation."""
    model_dir = tiny_model_dir("Qwen3ForCausalLM")
    expected, _ = generate(model_dir, prompts, GREEDY)
    sequences = [p + o for p, o in zip(prompts, ids(expected))]
    got, scheduler = generate(model_dir, prompts, GREEDY, replay=sequences, rate=0.9, num_pages=40,
                              decode_reserve_tokens=4)
    assert ids(got) == ids(expected)
    assert scheduler.stats.preemptions > 0 and scheduler.stats.accepted_tokens > 0
    assert_all_pages_back(scheduler)


@pytest.mark.slow  # a process group of two ranks on gloo
def test_tensor_parallel_ranks_verify_the_same_drafts(tiny_model_dir, prompts):
    """Every rank drafts from the same tokens with the same policy, so the ranks run the same verify
    batches in step, and the tokens are those of one rank without speculation."""
    model_dir = tiny_model_dir("Qwen3ForCausalLM")
    expected, _ = generate(model_dir, prompts, GREEDY)
    got, scheduler = generate(model_dir, prompts, GREEDY, speculative="ngram", tp=2)
    assert ids(got) == ids(expected)
    assert scheduler.stats.draft_tokens > 0
    assert_all_pages_back(scheduler)


def test_drafts_that_always_fail_switch_speculation_off(tiny_model_dir, prompts):
    """At 0% acceptance a request stops drafting after two verify steps and then tries rarely (after
    2, 4, ... 64 steps): most of its steps are plain decode steps."""
    model_dir = tiny_model_dir("Qwen3ForCausalLM")
    long = replace(GREEDY, max_tokens=200)
    expected, _ = generate(model_dir, prompts[:1], long)
    got, scheduler = generate(model_dir, prompts[:1], long, replay=[prompts[0] + ids(expected)[0]], rate=0.0)
    assert ids(got) == ids(expected)
    assert scheduler.stats.accepted_tokens == 0
    assert 0 < scheduler.stats.draft_tokens < 40  # of 200 steps


@pytest.mark.slow  # grammar compiles in worker processes: half a minute on 2 cores
def test_constrained_requests_verify_drafts_under_their_grammar(tiny_model_dir, prompts):
    """Each verified position is masked by the grammar after the drafts before it: constrained
    requests keep drafts (those the grammar allows and the model agrees with) and give the tokens
    they give without speculation; a draft the grammar refuses is never kept."""
    model_dir = tiny_model_dir("Qwen3ForCausalLM")
    params = replace(GREEDY, ignore_eos=False, constraint=("regex", "([a-z][0-9]){4,}\\."))
    expected, _ = generate(model_dir, prompts, params)
    sequences = [p + o for p, o in zip(prompts, ids(expected))]
    got, scheduler = generate(model_dir, prompts, params, replay=sequences, rate=0.7)
    assert ids(got) == ids(expected)
    assert [o["finish_reason"] for o in got] == [o["finish_reason"] for o in expected]
    assert 0 < scheduler.stats.accepted_tokens < scheduler.stats.draft_tokens
    assert_all_pages_back(scheduler)


def test_stop_strings_end_the_text_where_they_end_it_without_speculation(tiny_model_dir, prompts):
    """A stop string matched inside a step's several tokens ends the text before it, as when the
    tokens come one a step (the detokenizer's matching, LLM.generate's as the server's)."""
    model_dir = tiny_model_dir("Qwen3ForCausalLM")
    expected, _ = generate(model_dir, prompts, GREEDY)
    sequences = [p + o for p, o in zip(prompts, ids(expected))]
    params = [replace(GREEDY, stop=(o["text"][12:15],)) for o in expected]
    want, _ = generate(model_dir, prompts, params)
    got, scheduler = generate(model_dir, prompts, params, replay=sequences, rate=1.0)
    assert [o["text"] for o in got] == [o["text"] for o in want]
    assert [o["finish_reason"] for o in got] == [o["finish_reason"] for o in want]
    assert "stop" in {o["finish_reason"] for o in got} and scheduler.stats.accepted_tokens > 0
    assert_all_pages_back(scheduler)


@pytest.mark.slow  # peft adapters built, two runs with them: tens of seconds on 2 cores
def test_lora_requests_verify_drafts_through_their_adapter(lora_model_dir, lora_adapters, prompts):
    """A verify batch mixing adapters and the base model applies each request's adapter at every
    token it computes: the tokens are those without speculation."""
    adapters = {"r4": lora_adapters["r4"], "r8": lora_adapters["r8"]}
    params = [replace(GREEDY, lora=[None, "r4", "r8"][i % 3]) for i in range(len(prompts))]
    settings = {"lora_modules": adapters, "max_loras": 2}
    expected, _ = generate(lora_model_dir, prompts, params, **settings)
    sequences = [p + o for p, o in zip(prompts, ids(expected))]
    got, scheduler = generate(lora_model_dir, prompts, params, replay=sequences, rate=0.7, **settings)
    assert ids(got) == ids(expected)
    assert scheduler.stats.accepted_tokens > 0


@pytest.fixture(scope="module")
def eagle3_pair(tiny_model_dir, tmp_path_factory):
    """eagle3_pair(arch) -> (a tiny target of 4 layers, a random EAGLE-3 head for it)."""
    cache = {}

    def build(arch):
        if arch not in cache:
            target = tiny_model_dir(arch, **TINY_TARGET)
            cache[arch] = target, build_eagle3_head(str(tmp_path_factory.mktemp(f"eagle3-{arch}")), target)
        return cache[arch]

    return build


def check_eagle3_greedy(target, head, prompts, **settings):
    expected, _ = generate(target, prompts, GREEDY, **settings)
    got, scheduler = generate(target, prompts, GREEDY, draft_model=head, **settings)
    assert ids(got) == ids(expected)
    assert scheduler.stats.draft_tokens > len(prompts) * NEW_TOKENS // 2  # drafts at most steps
    assert_all_pages_back(scheduler)
    return scheduler


def test_eagle3_greedy_tokens_are_those_without_speculation(eagle3_pair, prompts):
    """The head runs after every forward pass (prefill chunks, decode, verify) and drafts every step;
    its drafts are verified like any others, and the target's KV, token pool and pages are untouched
    by the head's own cache."""
    check_eagle3_greedy(*eagle3_pair("Qwen3ForCausalLM"), prompts)


@pytest.mark.slow  # two runs per architecture
@pytest.mark.parametrize("arch", [a for a in ARCHITECTURES if a != "Qwen3ForCausalLM"])
def test_eagle3_greedy_tokens_are_those_without_speculation_on_every_architecture(eagle3_pair, prompts, arch):
    check_eagle3_greedy(*eagle3_pair(arch), prompts)


def test_eagle3_seeded_sampling_draws_the_same_tokens(eagle3_pair, prompts):
    """The head drafts its most likely tokens (a one-hot q), so the verify rule is the rejection rule
    exactly and each position draws with the request's seed: the tokens of decoding without it."""
    target, head = eagle3_pair("Qwen3ForCausalLM")
    params = [SamplingParams(temperature=0.9, top_k=50, seed=7 + i, max_tokens=NEW_TOKENS, min_tokens=20,
                             frequency_penalty=0.4) for i in range(len(prompts))]
    expected, _ = generate(target, prompts, params)
    got, scheduler = generate(target, prompts, params, draft_model=head)
    assert ids(got) == ids(expected)
    assert scheduler.stats.draft_tokens > 0
    assert_all_pages_back(scheduler)


def test_eagle3_with_a_small_pool_preempts_and_still_gives_the_same_tokens(eagle3_pair, prompts):
    """A preempted request resumes by recomputing its tokens, and the head's KV with them."""
    scheduler = check_eagle3_greedy(*eagle3_pair("Qwen3ForCausalLM"), prompts, num_pages=40, decode_reserve_tokens=4)
    assert scheduler.stats.preemptions > 0


@pytest.mark.slow  # a process group of two ranks on gloo
def test_eagle3_tensor_parallel_ranks_verify_the_same_drafts(eagle3_pair, prompts):
    """Every rank runs the replicated head over the same hidden states (the embedding's all-reduce
    in step) and takes rank 0's drafts: the ranks verify the same batches, tokens as without it."""
    target, head = eagle3_pair("Qwen3ForCausalLM")
    expected, _ = generate(target, prompts, GREEDY)
    got, scheduler = generate(target, prompts, GREEDY, draft_model=head, tp=2)
    assert ids(got) == ids(expected)
    assert scheduler.stats.draft_tokens > 0
    assert_all_pages_back(scheduler)
