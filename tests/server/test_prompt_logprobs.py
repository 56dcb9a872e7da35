"""Prompt logprobs through the real server: the completions API's echo with logprobs (OpenAI's
legacy scoring form) and vLLM's prompt_logprobs, read with the official openai client, equal HF
transformers' log-softmax on the same tiny model, whole and streamed, for text and token-id prompts.
Then lm-evaluation-harness runs against the server as it runs against vLLM: its `local-completions`
model, a loglikelihood task (multiple choice: echo with logprobs) and a generation task (greedy,
stop strings), over local task files and data (no Hub). Its numbers agree with HF's: each choice's
log-likelihood, the accuracy they give, and the exact-match score of greedy continuations."""

from __future__ import annotations

import json
import math

import lm_eval
import openai
import pytest
import torch
from lm_eval.tasks import TaskManager
from transformers import AutoModelForCausalLM, AutoTokenizer

from tests.server.serving import tiny_qwen3_server

pytestmark = pytest.mark.slow  # starts the server: out of the fast loop (tests/test_tiers.py)

MODEL = "tiny-qwen3"
QUESTIONS = ["The capital of France is", "A paged KV cache stores", "Hello, world! How are",
             "Numbers: 0 1 2", "def main():", "The quick brown fox"]
CHOICES = ["Paris", "keys", "you", "3", "print", "jumps over"]

# The arguments of test_structured_output.py and test_usage.py: the three modules share one server.
model_dir, server, client = tiny_qwen3_server("--served-model-name", MODEL, "--dtype", "float32",
                                              "--page-size", "4", "--num-pages", "2048", "--max-seq-len", "512")


def _ref(model_dir: str, ids: list[int]) -> torch.Tensor:
    hf = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32).eval()
    with torch.no_grad():
        return torch.log_softmax(hf(torch.tensor([ids])).logits[0].float(), dim=-1)


def test_echo_with_logprobs_scores_the_prompt_as_hf_does(client, model_dir):
    tok = AutoTokenizer.from_pretrained(model_dir)
    prompt = "The quick brown fox jumps over the lazy dog."
    ids = tok.encode(prompt)
    ref = _ref(model_dir, ids)
    for stream in (False, True):
        resp = client.completions.create(model=MODEL, prompt=prompt, echo=True, logprobs=2, max_tokens=1,
                                         temperature=0, stream=stream)
        if stream:
            chunks = [c.choices[0] for c in resp if c.choices]
            text = "".join(c.text for c in chunks)
            tokens = [t for c in chunks if c.logprobs for t in c.logprobs.tokens]
            token_logprobs = [v for c in chunks if c.logprobs for v in c.logprobs.token_logprobs]
            top = [d for c in chunks if c.logprobs for d in c.logprobs.top_logprobs]
        else:
            choice = resp.choices[0]
            text, tokens = choice.text, choice.logprobs.tokens
            token_logprobs, top = choice.logprobs.token_logprobs, choice.logprobs.top_logprobs
        assert text.startswith(prompt) and "".join(tokens) == text and len(tokens) == len(ids) + 1, stream
        assert token_logprobs[0] is None and top[0] is None  # nothing before the first token
        want = [ref[i - 1, ids[i]].item() for i in range(1, len(ids))]
        assert token_logprobs[1:len(ids)] == pytest.approx(want, abs=1e-4), stream
        for i in range(1, len(ids)):  # keyed by text: two tokens of one text (partial bytes) are one key
            best = ref[i - 1].topk(2).values.tolist()
            assert max(top[i].values()) == pytest.approx(best[0], abs=1e-4)
            assert all(min(abs(v - b) for b in best) < 1e-4 for v in top[i].values())
        assert token_logprobs[-1] == pytest.approx(ref[-1].max().item(), abs=1e-4)  # the greedy token's


def test_vllm_prompt_logprobs_of_token_ids_equal_hf(client, model_dir):
    ids = list(range(20, 45))
    ref = _ref(model_dir, ids)
    choice = client.completions.create(model=MODEL, prompt=ids, max_tokens=2, temperature=0,
                                       extra_body={"prompt_logprobs": 3}).choices[0]
    got = choice.model_extra["prompt_logprobs"]
    assert len(got) == len(ids) and got[0] is None
    for i in range(1, len(ids)):
        assert got[i][str(ids[i])]["logprob"] == pytest.approx(ref[i - 1, ids[i]].item(), abs=1e-4)
        top_ids = ref[i - 1].topk(3).indices.tolist()
        assert set(map(str, top_ids)) <= set(got[i])
    echoed = client.completions.create(model=MODEL, prompt=ids, echo=True, max_tokens=2, temperature=0).choices[0]
    assert echoed.text == AutoTokenizer.from_pretrained(model_dir).decode(ids) + choice.text


def test_max_tokens_0_with_echo_scores_the_prompt_alone(client, model_dir):
    """OpenAI's legacy scoring form (what older lm-evaluation-harness sends): the prompt and its
    logprobs, nothing generated, finish_reason length; without echo, or streamed, a 400 saying so."""
    tok = AutoTokenizer.from_pretrained(model_dir)
    prompt = "Hello, world! How are you today?"
    ids = tok.encode(prompt)
    ref = _ref(model_dir, ids)
    resp = client.completions.create(model=MODEL, prompt=prompt, echo=True, logprobs=0, max_tokens=0)
    choice = resp.choices[0]
    assert choice.text == prompt and choice.finish_reason == "length" and resp.usage.completion_tokens == 0
    assert "".join(choice.logprobs.tokens) == prompt and choice.logprobs.token_logprobs[0] is None
    want = [ref[i - 1, ids[i]].item() for i in range(1, len(ids))]
    assert choice.logprobs.token_logprobs[1:] == pytest.approx(want, abs=1e-4)
    for extra in ({"echo": False}, {"echo": True, "stream": True}):
        with pytest.raises(openai.BadRequestError, match="max_tokens 0"):
            client.completions.create(model=MODEL, prompt=prompt, max_tokens=0, **extra)


def _write_tasks(folder, rows_choice: list[dict], rows_gen: list[dict]) -> None:
    for name, rows in (("choice", rows_choice), ("gen", rows_gen)):
        with open(folder / f"{name}.jsonl", "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
    (folder / "choice.yaml").write_text(
        "task: minisgl_choice\ndataset_path: json\n"
        f"dataset_kwargs:\n  data_files:\n    test: {folder / 'choice.jsonl'}\n"
        "test_split: test\noutput_type: multiple_choice\ndoc_to_text: '{{question}}'\n"
        "doc_to_choice: '{{choices}}'\ndoc_to_target: '{{answer}}'\nmetric_list:\n  - metric: acc\n")
    (folder / "gen.yaml").write_text(
        "task: minisgl_gen\ndataset_path: json\n"
        f"dataset_kwargs:\n  data_files:\n    test: {folder / 'gen.jsonl'}\n"
        "test_split: test\noutput_type: generate_until\ndoc_to_text: '{{question}}'\n"
        "doc_to_target: '{{answer}}'\ngeneration_kwargs:\n  until: ['\\n\\n']\n  max_gen_toks: 6\n"
        "  do_sample: false\n  temperature: 0\nmetric_list:\n  - metric: exact_match\n")


class _HF:
    def __init__(self, path: str):
        self.tok = AutoTokenizer.from_pretrained(path)
        self.model = AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.float32).eval()

    def loglikelihood(self, context: str, continuation: str) -> float:
        """lm-eval's split of the pair into tokens (the context's trailing spaces moved to the
        continuation; the context's tokens, then the rest of the whole)."""
        spaces = len(context) - len(context.rstrip())
        if spaces:
            context, continuation = context[:-spaces], context[-spaces:] + continuation
        whole = self.tok.encode(context + continuation)
        n_ctx = len(self.tok.encode(context))
        with torch.no_grad():
            lp = torch.log_softmax(self.model(torch.tensor([whole])).logits[0].float(), dim=-1)
        return sum(lp[i - 1, whole[i]].item() for i in range(n_ctx, len(whole)))

    def greedy(self, context: str, n: int) -> str:
        ids = self.tok.encode(context)
        out = self.model.generate(torch.tensor([ids]), max_new_tokens=n, do_sample=False,
                                  eos_token_id=self.tok.eos_token_id, pad_token_id=self.tok.eos_token_id)
        return self.tok.decode(out[0, len(ids):], skip_special_tokens=True).split("\n\n")[0]


def test_lm_eval_loglikelihood_and_generation_tasks_agree_with_hf(server, model_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "datasets"))
    hf = _HF(model_dir)
    # Each question's choices: its own continuation and the next question's; the answer is the
    # first for even rows, the second for odd ones, so HF's accuracy is neither 0 nor 1 by design.
    rows_choice = [{"question": q, "choices": [CHOICES[i], CHOICES[(i + 1) % len(CHOICES)]], "answer": i % 2}
                   for i, q in enumerate(QUESTIONS)]
    # Half the targets are HF's own greedy continuation, half are not: exact_match 0.5 if they agree.
    greedy = [hf.greedy(q, 6) for q in QUESTIONS]
    rows_gen = [{"question": q, "answer": g if i % 2 == 0 else g + "?"} for i, (q, g) in enumerate(zip(QUESTIONS, greedy))]
    _write_tasks(tmp_path, rows_choice, rows_gen)

    results = lm_eval.simple_evaluate(
        model="local-completions",
        model_args={"model": MODEL, "base_url": server.url + "/v1/completions", "tokenizer_backend": "huggingface",
                    "tokenizer": model_dir, "tokenized_requests": True, "num_concurrent": 2, "max_retries": 1},
        tasks=["minisgl_choice", "minisgl_gen"], task_manager=TaskManager(include_path=str(tmp_path)),
        log_samples=True, batch_size=1)

    # Loglikelihood: every choice's score is HF's, and so is the accuracy they give.
    correct = 0
    samples = sorted(results["samples"]["minisgl_choice"], key=lambda s: s["doc_id"])
    assert len(samples) == len(QUESTIONS)
    for s in samples:
        doc = rows_choice[s["doc_id"]]
        want = [hf.loglikelihood(*args) for args in s["arguments"]]  # (context, continuation) per choice
        got = [float(r[0][0]) for r in s["resps"]]
        assert got == pytest.approx(want, abs=1e-3), doc
        correct += int(max(range(len(want)), key=want.__getitem__) == doc["answer"])
    assert results["results"]["minisgl_choice"]["acc,none"] == pytest.approx(correct / len(QUESTIONS))
    assert all(math.isfinite(v) for s in samples for r in s["resps"] for v in [float(r[0][0])])

    # Generation: greedy continuations, cut at the stop string, as HF's.
    gen = sorted(results["samples"]["minisgl_gen"], key=lambda s: s["doc_id"])
    assert [s["filtered_resps"][0] for s in gen] == greedy
    assert results["results"]["minisgl_gen"]["exact_match,none"] == pytest.approx(0.5)
