"""The EAGLE-3 drafter proposes what the published head computes: against a reference written from
the format's definition (the head recomputed over the whole sequence, no KV cache, with the target's
hidden states from HF transformers' own forward pass), for every draft the server made while
serving requests through chunked prefill, the radix cache, decode and verify steps. A head that
predicts the target exactly gets its drafts accepted, and the tokens stay those without it."""

from __future__ import annotations

import random
import shutil
from collections import Counter

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from scipy.stats import chisquare
from transformers import AutoModelForCausalLM

from minisgl.core.params import SamplingParams
from minisgl.llm import LLM
from tests.speculative.eagle3_heads import TINY_TARGET, build_eagle3_head, head_config

SETTINGS = {"device": "cpu", "dtype": torch.float32, "max_running_requests": 8, "num_pages": 512, "page_size": 4,
            "cache": "radix", "max_prefill_length": 16, "speculative_min_acceptance": 0.0}
GREEDY = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)


@pytest.fixture(scope="module")
def prompts():
    rng = random.Random(5)
    return [[rng.randint(3, 380) for _ in range(rng.randint(6, 30))] for _ in range(4)]


def rms(x, w, eps=1e-6):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def rope(x, positions, theta, dim):
    inv = 1.0 / theta ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim)
    angles = positions[:, None].float() * inv[None]
    cos, sin = torch.cat([angles.cos()] * 2, -1)[:, None], torch.cat([angles.sin()] * 2, -1)[:, None]
    rotated = torch.cat([-x[..., dim // 2:], x[..., : dim // 2]], -1)
    return x * cos + rotated * sin


def head_layer(w, cfg, embeds, hidden):
    """The decoder layer over every position at once, causal: the outputs before the final norm."""
    n, hd = len(embeds), cfg["head_dim"]
    x = torch.cat([rms(embeds, w["midlayer.input_layernorm.weight"]), rms(hidden, w["midlayer.hidden_norm.weight"])], -1)
    q = (x @ w["midlayer.self_attn.q_proj.weight"].T).view(n, -1, hd)
    k = (x @ w["midlayer.self_attn.k_proj.weight"].T).view(n, -1, hd)
    v = (x @ w["midlayer.self_attn.v_proj.weight"].T).view(n, -1, hd)
    pos = torch.arange(n)
    q, k = rope(q, pos, cfg["rope_theta"], hd), rope(k, pos, cfg["rope_theta"], hd)
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    scores = torch.einsum("qhd,khd->hqk", q, k) / hd ** 0.5
    scores = scores.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    o = torch.einsum("hqk,khd->qhd", scores.softmax(-1), v).reshape(n, -1)
    h = o @ w["midlayer.self_attn.o_proj.weight"].T + hidden
    m = rms(h, w["midlayer.post_attention_layernorm.weight"])
    return (F.silu(m @ w["midlayer.mlp.gate_proj.weight"].T) * (m @ w["midlayer.mlp.up_proj.weight"].T)) \
        @ w["midlayer.mlp.down_proj.weight"].T + h


def reference_drafts(target, w, cfg, ids, k):
    """k drafts after `ids` (the request's tokens so far, the last one not yet computed)."""
    with torch.no_grad():
        states = target(torch.tensor([ids[:-1]]), output_hidden_states=True).hidden_states
        layers = len(target.model.layers)
        aux = torch.cat([states[i][0] for i in (2, layers // 2, layers - 3)], -1)  # inputs of those layers
        tokens, hidden = list(ids[1:]), list(aux @ w["fc.weight"].T)
        drafts = []
        for _ in range(k):
            out = head_layer(w, cfg, target.model.embed_tokens.weight[tokens], torch.stack(hidden))
            best = int((rms(out[-1], w["norm.weight"]) @ w["lm_head.weight"].T).argmax())
            drafts.append(best + int(w["d2t"][best]))
            tokens.append(drafts[-1])
            hidden.append(out[-1])
        return drafts


def serve_recording(target_dir, head_dir, prompts, params=GREEDY, **settings):
    """Outputs of a run with the head, each proposal (the request's tokens, its drafts), the
    scheduler's stats and how many verify steps ran in graphs and eagerly."""
    llm = LLM(target_dir, **{**SETTINGS, **settings}, speculative="eagle3", draft_model=head_dir)
    drafter, proposals = llm.scheduler.speculator.drafter, []
    propose = drafter.propose_batch

    def recording(reqs, ks):
        drafts = propose(reqs, ks)
        proposals.extend((list(r.all_ids), d) for r, d in zip(reqs, drafts))
        return drafts

    drafter.propose_batch = recording
    try:
        outputs = llm.generate(prompts, params, use_tqdm=False)
        return [o["token_ids"] for o in outputs], proposals, llm.scheduler.stats, dict(llm.scheduler.engine.verify_steps)
    finally:
        llm.shutdown()


def plain(target_dir, prompts, params=GREEDY, **settings):
    llm = LLM(target_dir, **{k: v for k, v in {**SETTINGS, **settings}.items() if not k.startswith("speculative")})
    try:
        return [o["token_ids"] for o in llm.generate(prompts, params, use_tqdm=False)]
    finally:
        llm.shutdown()


@pytest.mark.parametrize("arch", ["Qwen3ForCausalLM", "LlamaForCausalLM"])
def test_drafts_are_the_heads_own_over_the_whole_sequence(tiny_model_dir, tmp_path, prompts, arch):
    target_dir = tiny_model_dir(arch, **TINY_TARGET)
    head_dir = build_eagle3_head(str(tmp_path / "head"), target_dir, rope_scaling=None)
    _, proposals, stats, _ = serve_recording(target_dir, head_dir, prompts)
    assert stats.draft_tokens > 0 and len(proposals) > 20
    target = AutoModelForCausalLM.from_pretrained(target_dir, dtype=torch.float32)
    w, cfg = load_file(f"{head_dir}/model.safetensors"), head_config(target_dir)
    for ids, drafts in proposals:
        assert drafts == reference_drafts(target, w, cfg, ids, len(drafts)), f"after {len(ids)} tokens"


def bigram(target_dir, out_dir):
    """The target with every layer's output zeroed: its next token depends on the last one alone."""
    shutil.copytree(target_dir, out_dir)  # the tokenizer with it
    model = AutoModelForCausalLM.from_pretrained(target_dir, dtype=torch.float32)
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
    model.save_pretrained(out_dir)
    return out_dir


def oracle_head(path, target_dir):
    """A head that predicts the bigram target exactly: attention (q = k = the normalized embedding)
    picks the token's own value, the normalized embedding, which the target's norm and lm_head turn
    into the target's logits; the hidden state is normed to zero."""
    target = AutoModelForCausalLM.from_pretrained(target_dir, dtype=torch.float32)
    config = {**head_config(target_dir), "num_key_value_heads": 4, "draft_vocab_size": target.config.vocab_size,
              "norm_before_residual": True}
    h = config["hidden_size"]
    eye, zero = torch.eye(h), torch.zeros(h, h)
    tensors = {
        "fc.weight": torch.zeros(h, 3 * h),
        "midlayer.input_layernorm.weight": torch.ones(h), "midlayer.hidden_norm.weight": torch.zeros(h),
        "midlayer.post_attention_layernorm.weight": torch.ones(h),
        "midlayer.self_attn.q_proj.weight": 8 * torch.cat([eye, zero], 1),
        "midlayer.self_attn.k_proj.weight": 8 * torch.cat([eye, zero], 1),
        "midlayer.self_attn.v_proj.weight": torch.cat([eye, zero], 1), "midlayer.self_attn.o_proj.weight": eye,
        "midlayer.mlp.gate_proj.weight": torch.zeros(96, h), "midlayer.mlp.up_proj.weight": torch.zeros(96, h),
        "midlayer.mlp.down_proj.weight": torch.zeros(h, 96),
        "norm.weight": target.model.norm.weight.detach().clone(), "lm_head.weight": target.lm_head.weight.detach().clone(),
    }
    return build_eagle3_head(path, target_dir, tensors=tensors, **config)


def test_a_head_that_predicts_the_target_has_its_drafts_accepted(tiny_model_dir, tmp_path, prompts):
    target_dir = bigram(tiny_model_dir("LlamaForCausalLM", **TINY_TARGET), str(tmp_path / "target"))
    head_dir = oracle_head(str(tmp_path / "head"), target_dir)
    got, _, stats, _ = serve_recording(target_dir, head_dir, prompts)
    assert got == plain(target_dir, prompts)
    assert stats.accepted_tokens > 0.9 * stats.draft_tokens > 0


def top_k_probs(model, ids, k):
    with torch.no_grad():
        probs = model(torch.tensor([ids])).logits[0, -1].softmax(-1)
    top = probs.topk(k)
    return dict(zip(top.indices.tolist(), (top.values / top.values.sum()).tolist()))


@pytest.mark.slow  # 1,200 sampled requests: half a minute on 2 cores
def test_sampled_tokens_keep_the_targets_distribution(tiny_model_dir, tmp_path):
    """Three tokens sampled (top-k 2, so 8 outcomes) through verify steps whose drafts are mostly
    accepted: the joint distribution is the target's (chi-square against HF's probabilities)."""
    target_dir = bigram(tiny_model_dir("LlamaForCausalLM", **TINY_TARGET), str(tmp_path / "target"))
    head_dir = oracle_head(str(tmp_path / "head"), target_dir)
    prompt, n = [11, 42, 7, 99, 150, 3], 1200
    params = SamplingParams(temperature=1.0, top_k=2, max_tokens=3, ignore_eos=True)
    got, _, stats, _ = serve_recording(target_dir, head_dir, [prompt] * n, params, max_running_requests=32)
    assert stats.accepted_tokens > 0.3 * n
    model = AutoModelForCausalLM.from_pretrained(target_dir, dtype=torch.float32)
    expected = {}
    for a, pa in top_k_probs(model, prompt, 2).items():
        for b, pb in top_k_probs(model, prompt + [a], 2).items():
            for c, pc in top_k_probs(model, prompt + [a, b], 2).items():
                expected[(a, b, c)] = pa * pb * pc
    counts = Counter(tuple(ids) for ids in got)
    assert set(counts) <= set(expected)
    cells, total = sorted(expected), sum(expected.values())  # 1 up to float32 rounding
    assert chisquare([counts[c] for c in cells], [n * expected[c] / total for c in cells]).pvalue > 1e-3
