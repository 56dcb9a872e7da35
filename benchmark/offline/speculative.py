"""Speculative decoding's time per output token against decoding without it, at a set acceptance.

    python benchmark/offline/speculative.py --model .bench-models/llama-3.1-8b --dummy-weight

For each batch size: a run without speculation gives each prompt's greedy continuation and the
baseline TPOT; then for each acceptance rate a run with --speculative whose drafter replays that
continuation, each drafted token replaced by a wrong one with probability 1 - rate
(minisgl/benchmark/replay_drafter.py), k = --speculative-num-tokens. TPOT is each request's decode
time over its tokens after the first, averaged over the requests; the ratio to the baseline and the
acceptance measured (accepted / drafted) go beside it, and how many verify steps ran in CUDA graphs
(minisgl/engine/verify_graph.py; the rest eagerly). Speculation's own switches stay as the server
has them (--speculative-max-batch, --speculative-min-acceptance), so a large batch or a rate of 0
measures the off switch. With --dummy-weight the weights are made greedy-peaked first
(minisgl/benchmark/peaked_weights.py): near-flat dummy logits let the verify and decode kernels
pick different tokens on ties, and the replayed continuation would be wrong from there. Writes JSON
and a PNG of the ratios. With --profile, where a batch-1 step's time goes (GPU kernels, host).
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import pstats
import random
import time

import torch
from torch.profiler import ProfilerActivity, profile

from minisgl.benchmark.flags import ENGINE_FLAGS, llm_kwargs
from minisgl.benchmark.kernel_profile import kernel_table, show
from minisgl.benchmark.peaked_weights import make_greedy_peaked
from minisgl.benchmark.replay_drafter import ReplayDrafter
from minisgl.benchmark.report import bar_plot, device_name, write_json
from minisgl.core.params import SamplingParams
from minisgl.llm import LLM
from minisgl.message import TokenizedRequestMsg
from minisgl.server.args import add_flags

FLAGS = tuple(name for name in ENGINE_FLAGS if name != "max_running_requests")
SPEC_FLAGS = ("speculative_num_tokens", "speculative_max_batch", "speculative_min_acceptance")


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=".bench-models/llama-3.1-8b")
    add_flags(p, FLAGS + SPEC_FLAGS, dtype="bfloat16")
    p.add_argument("--batches", default="1,64", help="batch sizes, comma-separated")
    p.add_argument("--rates", default="0.8,0", help="drafted tokens' chance of being right, comma-separated")
    p.add_argument("--prompt-len", type=int, default=128)
    p.add_argument("--decode-steps", type=int, default=256)
    p.add_argument("--profile", action="store_true",
                   help="at batch 1, also profile each run's steps: GPU kernels and the host's busiest functions")
    p.add_argument("--out", default="results/speculative.json")
    return p.parse_args()


def run(args, prompts, rate: float | None, sequences=None) -> dict:
    """One LLM: without speculation (rate None) or with the replay drafter at `rate`."""
    kwargs = {**llm_kwargs(args, FLAGS), "max_running_requests": max(len(prompts), 8),
              "max_seq_len": args.prompt_len + args.decode_steps + args.speculative_num_tokens + 16}
    if rate is not None:
        kwargs.update(speculative="ngram", **{name: getattr(args, name) for name in SPEC_FLAGS})
    llm = LLM(args.model, **kwargs)
    try:
        if args.dummy_weight:  # near-flat logits would part the two paths on ties (make_greedy_peaked)
            make_greedy_peaked(llm.scheduler.engine.model)
        return _measure(llm, args, prompts, rate, sequences)
    finally:  # the next LLM sizes its KV cache from free memory: nothing of this one may stay referenced
        llm.shutdown()
        del llm
        gc.collect()
        torch.cuda.empty_cache()


def _measure(llm: LLM, args, prompts, rate: float | None, sequences) -> dict:
    s = llm.scheduler
    vocab = s.engine.model_config.vocab_size
    warm = [[random.Random(i).randrange(vocab) for _ in range(args.prompt_len)] for i in range(len(prompts))]
    llm.generate(warm, SamplingParams(temperature=0, max_tokens=16, ignore_eos=True), use_tqdm=False)

    def fresh_drafter() -> None:
        if rate is not None:
            s.speculator.drafter = ReplayDrafter(sequences, rate, vocab)
            s.speculator.policy.reqs.clear()

    fresh_drafter()
    s.stats.draft_tokens = s.stats.accepted_tokens = 0
    s.engine.verify_steps.update(graph=0, eager=0)
    stamps, tokens, _ = _decode(llm, prompts, args.decode_steps, 10**9)
    tpots = [(t[-1] - t[0]) / (len(t) - 1) for t in stamps]
    drafted, accepted = s.stats.draft_tokens, s.stats.accepted_tokens
    result = {"rate": rate, "tpot_s": sum(tpots) / len(tpots), "drafted": drafted, "accepted": accepted,
              "acceptance": accepted / drafted if drafted else None,
              "verify_graphs": s.engine.verify_in_graphs, "verify_steps": dict(s.engine.verify_steps),
              "outputs": tokens}
    if args.profile and len(prompts) == 1:
        fresh_drafter()
        _profile(llm, prompts, args.decode_steps, f"batch 1, {'no speculation' if rate is None else f'rate {rate}'}")
    return result


def _decode(llm: LLM, prompts, decode_steps: int, first_uid: int) -> tuple[list, list, int]:
    """Each prompt's token arrival times and tokens, greedy, `decode_steps` each; and how many scheduler
    turns that took."""
    params = SamplingParams(temperature=0, max_tokens=decode_steps, ignore_eos=True)
    uids = range(first_uid, first_uid + len(prompts))
    for uid, p in zip(uids, prompts):  # through the scheduler server, as LLM.generate goes (TP followers too)
        llm.inbox.put(TokenizedRequestMsg(uid, p, params))
    stamps: dict[int, list[float]] = {uid: [] for uid in uids}
    tokens: dict[int, list[int]] = {uid: [] for uid in uids}
    finished = turns = 0
    while finished < len(prompts):
        llm.server.run_once()
        turns += 1
        outs, llm._outputs[:] = list(llm._outputs), []
        now = time.perf_counter()
        for o in outs:
            if o.token_id is not None:
                stamps[o.uid].append(now)
                tokens[o.uid].append(o.token_id)
            finished += o.finish_reason is not None
    return [stamps[uid] for uid in uids], [tokens[uid] for uid in uids], turns


def _profile(llm: LLM, prompts, decode_steps: int, title: str) -> None:
    """Where a step's time goes: GPU kernels per scheduler turn against its wall time (torch.profiler),
    then the host's busiest functions (cProfile, a pass of its own: it slows the host)."""
    on_gpu = torch.cuda.is_available()
    with profile(activities=[ProfilerActivity.CUDA if on_gpu else ProfilerActivity.CPU]) as prof:
        start = time.perf_counter()
        _, _, turns = _decode(llm, prompts, decode_steps, 10**9 + 10**6)
        if on_gpu:
            torch.cuda.synchronize()
        wall = time.perf_counter() - start
    show(f"{title}: {turns} scheduler turns", wall * 1e6 / turns, *kernel_table(prof, turns))
    host = cProfile.Profile()
    host.enable()
    _, _, turns = _decode(llm, prompts, decode_steps, 10**9 + 2 * 10**6)
    host.disable()
    print("  host, per turn (under cProfile): tottime, cumtime, calls")
    rows = sorted(pstats.Stats(host).stats.items(), key=lambda kv: -kv[1][2])[:20]
    for (file, line, fn), (_, calls, tt, ct, _) in rows:
        print(f"    {tt * 1e3 / turns:7.3f} {ct * 1e3 / turns:7.3f} ms {calls / turns:6.1f}x  {fn} ({file.split('/')[-1]}:{line})")


def main() -> None:
    args = parse_args()
    if args.dummy_weight and args.tp > 1:
        raise SystemExit("speculative.py: --dummy-weight needs --tp 1 (the weights are made greedy-peaked on rank 0)")
    rng = random.Random(0)
    results = []
    for batch in map(int, args.batches.split(",")):
        vocab = _vocab(args.model)
        prompts = [[rng.randrange(vocab) for _ in range(args.prompt_len)] for _ in range(batch)]
        base = run(args, prompts, None)
        sequences = [p + o for p, o in zip(prompts, base.pop("outputs"), strict=True)]
        print(f"batch {batch}: no speculation, TPOT {base['tpot_s'] * 1e3:.2f} ms")
        for rate in map(float, args.rates.split(",")):
            r = run(args, prompts, rate, sequences)
            same = r.pop("outputs") == [s[args.prompt_len:] for s in sequences]
            r["ratio"] = r["tpot_s"] / base["tpot_s"]
            r["same_tokens"] = same
            acc = "-" if r["acceptance"] is None else f"{r['acceptance']:.2f}"
            steps = r["verify_steps"]
            print(f"batch {batch}: rate {rate}: TPOT {r['tpot_s'] * 1e3:.2f} ms, {r['ratio']:.3f}x; "
                  f"drafted {r['drafted']}, accepted {r['accepted']} ({acc}); tokens as without: {same}; "
                  f"verify steps in CUDA graphs {steps['graph']} of {steps['graph'] + steps['eager']}"
                  f"{'' if r['verify_graphs'] else ' (no verify graphs captured)'}")
            results.append({"batch": batch, "baseline_tpot_s": base["tpot_s"], **r})
    write_json(args.out, {"benchmark": "speculative", "device": device_name(), "model": args.model,
                          "k": args.speculative_num_tokens, "prompt_len": args.prompt_len,
                          "decode_steps": args.decode_steps, "runs": results})
    png = args.out.removesuffix(".json") + ".png"
    bar_plot(png, f"TPOT with speculation / without (k = {args.speculative_num_tokens})",
             [f"bs {r['batch']}, {r['rate']:.0%}" for r in results], [r["ratio"] for r in results], "ratio", fmt="%.2f")
    print(f"wrote {args.out} and {png}")


def _vocab(model: str) -> int:
    from minisgl.models import load_model_config

    return load_model_config(model).vocab_size


if __name__ == "__main__":
    main()
