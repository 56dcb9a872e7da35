"""The server at rate inf against its own offline engine, interleaved in one call.

One server (python -m minisgl, --num-pages PAGES) and one offline engine (offline_worker.py, the
same PAGES) are started side by side on the GPU and stay up; then, pair after pair, one offline run
of the serving workload (bench.py's run K: fresh ids) and one online burst at rate inf (bench.py's
run K-1 of --repeats N: fresh ids, chat API, 4 client processes), the order alternating (odd pairs
offline first, even pairs online first), until the deadline. Env: T0 (epoch of the call's start),
DEADLINE (s after T0 by which everything is stopped), R (results dir), MODEL, PAGES, NMAX.
"""

import json
import os
import statistics
import sys
import time

from harness import (
    chat_target,
    clock,
    driver_env,
    load_online_bench,
    recorder,
    serving_args,
    start_engine_and_server,
    stop_engine_and_server,
    warm_requests,
)


def main():
    T0, DEADLINE, R, MODEL, PAGES = driver_env(deadline=360)
    NMAX = int(os.environ.get("NMAX", "14"))
    TAIL = 20.0  # stopping both and packing

    el, log = clock(T0)

    ob = load_online_bench()
    from minisgl.benchmark.online import summarize
    from minisgl.benchmark.sse_client import run_requests

    record = recorder(R)

    worker, wreply, srv, url = start_engine_and_server(R, MODEL, PAGES, log)

    def offline(k):
        worker.stdin.write(f"run {k}\n")
        worker.stdin.flush()
        r = wreply()
        r["elapsed_end"] = el()
        record({"arm": "offline", **r})
        log(f"offline run {k}: {r['requests']} requests, {r['output_tokens']} tokens in {r['seconds']:.2f} s = "
            f"{r['tokens_per_s']:.1f} tok/s")
        return r

    stopped = False
    try:
        init = wreply()
        record({"arm": "offline-init", **init})
        log(f"offline engine up: {init['num_pages']} pages x {init['page_size']}, init {init['init_s']:.1f} s, "
            f"timings {init.get('timings')}")
        offline(0)  # bench.py's unmeasured run (overlaps the server's start)
        srv.wait_ready(max(30.0, DEADLINE - TAIL - el()))
        log("server ready")

        args = serving_args(ob, url, R, NMAX)
        target, vocab = chat_target(ob, args, url)
        runs = ob.workloads(args, vocab)
        common = dict(processes=args.client_processes, progress=False)

        def online(i, label):
            results, seconds, peak = run_requests(target, runs[i][2] if i >= 0 else ob.warmup_burst(runs, vocab),
                                                  desc=label, **common)
            row = {"peak_in_flight": peak, **summarize(results, seconds)}
            row.update(arm="online", label=label, run_index=i, elapsed_end=el())
            record(row)
            log(f"online {label}: {row['completed']}/{row['requests']} done, {row['failed']} failed, "
                f"{row['output_tokens']}/{row['expected_output_tokens']} tokens ({row['short_outputs']} short), "
                f"{row['input_tokens']} prompt tokens, {seconds:.2f} s = {row['output_throughput']:.1f} tok/s, "
                f"TTFT p50 {row['ttft_ms']['p50']}")
            return row

        # bench.py's short warm-up requests, then its warm-up burst (unmeasured)
        warm = warm_requests(ob, vocab)
        run_requests(target, warm, **common)
        online(-1, "warm-up burst")

        pairs, durations = [], []
        for k in range(1, NMAX + 1):
            est = max(durations) if durations else 32.0
            if el() + est + TAIL > DEADLINE:
                log(f"stopping before pair {k}: {el():.0f} s + {est:.0f} s + {TAIL:.0f} s > {DEADLINE:.0f} s")
                break
            t = time.time()
            if k % 2:
                off = offline(k)
                on = online(k - 1, f"pair {k}")
            else:
                on = online(k - 1, f"pair {k}")
                off = offline(k)
            durations.append(time.time() - t)
            ratio = on["output_throughput"] / off["tokens_per_s"]
            pairs.append({"pair": k, "order": "off,on" if k % 2 else "on,off", "offline_tok_s": off["tokens_per_s"],
                          "offline_s": off["seconds"], "offline_tokens": off["output_tokens"],
                          "offline_requests": off["requests"], "online_tok_s": on["output_throughput"],
                          "online_s": on["duration_s"], "online_tokens": on["output_tokens"],
                          "online_completed": on["completed"], "online_requests": on["requests"],
                          "online_failed": on["failed"], "online_short": on["short_outputs"],
                          "online_prompt_tokens": on["input_tokens"], "ratio": ratio})
            log(f"pair {k}: ratio {ratio:.4f} (pair took {durations[-1]:.1f} s)")
    finally:
        stop_engine_and_server(worker, srv, log)
        stopped = True

    if pairs:
        on = [p["online_tok_s"] for p in pairs]
        off = [p["offline_tok_s"] for p in pairs]
        ratios = [p["ratio"] for p in pairs]
        summ = {
            "pairs": len(pairs), "num_pages": PAGES,
            "median_ratio": statistics.median(ratios), "mean_of_ratios": statistics.fmean(ratios),
            "ratio_of_means": statistics.fmean(on) / statistics.fmean(off),
            "min_ratio": min(ratios), "max_ratio": max(ratios),
            "ratio_spread": (max(ratios) - min(ratios)) / statistics.fmean(ratios),
            "ratio_stdev": statistics.stdev(ratios) if len(ratios) > 1 else None,
            "online": {"mean": statistics.fmean(on), "min": min(on), "max": max(on),
                       "spread": (max(on) - min(on)) / statistics.fmean(on)},
            "offline": {"mean": statistics.fmean(off), "min": min(off), "max": max(off),
                        "spread": (max(off) - min(off)) / statistics.fmean(off)},
        }
        json.dump({"summary": summ, "pairs": pairs}, open(os.path.join(R, "pairs.json"), "w"), indent=1)
        print("\n| pair | order | offline tok/s | server tok/s | ratio | offline tokens | server tokens | done |")
        print("|---|---|---|---|---|---|---|---|")
        for p in pairs:
            print(f"| {p['pair']} | {p['order']} | {p['offline_tok_s']:.0f} | {p['online_tok_s']:.0f} | "
                  f"{p['ratio']:.3f} | {p['offline_tokens']} | {p['online_tokens']} | "
                  f"{p['online_completed']}/{p['online_requests']} |")
        print(json.dumps(summ, indent=1))
    return 0 if stopped and pairs else 1


if __name__ == "__main__":
    sys.exit(main())
