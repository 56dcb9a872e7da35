"""The server with --speculative ngram, driven by the official openai client: streamed completions
(greedy, with and without a stop string) carry the text the offline LLM gives without speculation,
and /metrics counts the drafted and accepted tokens."""

from __future__ import annotations

import pytest
import torch

from minisgl.core.params import SamplingParams
from minisgl.llm import LLM
from tests.server.serving import metric, tiny_qwen3_server, wait_for

pytestmark = pytest.mark.slow  # starts the server

ARGS = ("--speculative", "ngram", "--dtype", "float32", "--page-size", "4", "--num-pages", "512",
        "--max-seq-len", "512")
model_dir, server, client = tiny_qwen3_server(*ARGS)
# Text that repeats itself: prompt lookup finds its n-grams.
PROMPTS = ["the cat sat on the mat. the cat sat on the mat. the cat sat on the", "one two three one two three one two"]
MAX_TOKENS = 40


@pytest.fixture(scope="module")
def reference(model_dir):
    """The offline LLM without speculation: greedy text, and with a stop string from its middle."""
    llm = LLM(model_dir, device="cpu", dtype=torch.float32, page_size=4, num_pages=512, max_seq_len=512)
    try:
        greedy = SamplingParams(temperature=0, max_tokens=MAX_TOKENS, ignore_eos=True)
        plain = llm.generate(PROMPTS, greedy, use_tqdm=False)
        stops = [o["text"][10:13] for o in plain]
        stopped = llm.generate(PROMPTS, [SamplingParams(temperature=0, max_tokens=MAX_TOKENS, ignore_eos=True,
                                                        stop=(s,)) for s in stops], use_tqdm=False)
        return plain, stops, stopped
    finally:
        llm.shutdown()


def stream(client, prompt, **kwargs):
    chunks = client.completions.create(model=client.models.list().data[0].id, prompt=prompt, max_tokens=MAX_TOKENS,
                                       temperature=0, stream=True, extra_body={"ignore_eos": True}, **kwargs)
    text, reason = "", None
    for chunk in chunks:
        text += chunk.choices[0].text
        reason = chunk.choices[0].finish_reason or reason
    return text, reason


def test_streamed_text_is_the_text_without_speculation(server, client, reference):
    plain, _, _ = reference
    for prompt, want in zip(PROMPTS, plain):
        assert stream(client, prompt) == (want["text"], want["finish_reason"])


def test_a_stop_string_ends_the_stream_where_it_does_without_speculation(server, client, reference):
    _, stops, stopped = reference
    for prompt, stop, want in zip(PROMPTS, stops, stopped):
        assert stream(client, prompt, stop=[stop]) == (want["text"], "stop")


def test_metrics_count_drafted_and_accepted_tokens(server, client, reference):
    stream(client, PROMPTS[0])
    wait_for(lambda: metric(server, "minisgl_spec_decode_num_draft_tokens_total") > 0, what="drafts counted")
    drafted = metric(server, "minisgl_spec_decode_num_draft_tokens_total")
    accepted = metric(server, "minisgl_spec_decode_num_accepted_tokens_total")
    assert 0 <= accepted <= drafted
    assert metric(server, "minisgl_spec_decode_draft_acceptance_rate") == pytest.approx(accepted / drafted)
