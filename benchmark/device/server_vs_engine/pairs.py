"""The server at rate inf against its own offline engine, interleaved in one call.

One server (python -m minisgl, --num-pages PAGES) and one offline engine (offline_worker.py, the
same PAGES) are started side by side on the GPU and stay up; then, pair after pair, one offline run
of the serving workload (bench.py's run K: fresh ids) and one online burst at rate inf (bench.py's
run K-1 of --repeats N: fresh ids, chat API, 4 client processes), the order alternating (odd pairs
offline first, even pairs online first), until the deadline. Env: T0 (epoch of the call's start),
DEADLINE (s after T0 by which everything is stopped), R (results dir), MODEL, PAGES, NMAX.
"""

import importlib.util
import json
import os
import statistics
import subprocess
import sys
import time


def main():
    T0 = float(os.environ["T0"])
    DEADLINE = float(os.environ.get("DEADLINE", "360"))
    R = os.environ["R"]
    MODEL = os.environ["MODEL"]
    PAGES = int(os.environ.get("PAGES", "32768"))
    NMAX = int(os.environ.get("NMAX", "14"))
    TAIL = 20.0  # stopping both and packing

    def el():
        return time.time() - T0

    def log(msg):
        print(f"[{el():6.1f}s] {msg}", flush=True)

    spec = importlib.util.spec_from_file_location("online_bench", os.path.join("benchmark", "online", "bench.py"))
    ob = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ob)
    from minisgl.benchmark.online import summarize
    from minisgl.benchmark.server_process import ServerProcess
    from minisgl.benchmark.sse_client import Target, chat_words, run_requests

    records = open(os.path.join(R, "records.jsonl"), "w")

    def record(obj):
        records.write(json.dumps(obj) + "\n")
        records.flush()

    port = 1919
    url = f"http://127.0.0.1:{port}"
    # the offline engine first, the server right after: both start together
    wlog = open(os.path.join(R, "offline-worker.log"), "w")
    worker = subprocess.Popen([sys.executable, os.path.join(os.path.dirname(__file__), "offline_worker.py"), MODEL,
                               str(PAGES)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=wlog, text=True,
                              bufsize=1)
    open(os.path.join(R, "worker.pid"), "w").write(str(worker.pid))
    srv_cmd = [sys.executable, "-m", "minisgl", "--model", MODEL, "--dummy-weight", "--num-pages", str(PAGES),
               "--host", "127.0.0.1", "--port", str(port)]
    srv = ServerProcess(srv_cmd, url, os.path.join(R, "server.log"), command=True)
    open(os.path.join(R, "server.pid"), "w").write(str(srv.proc.pid))
    log(f"started offline worker pid {worker.pid} and server pid {srv.proc.pid}: {' '.join(srv_cmd)}")

    def wreply():
        while True:
            line = worker.stdout.readline()
            if not line:
                raise RuntimeError(f"offline worker ended (rc {worker.poll()})")
            if line.startswith("@@ "):
                return json.loads(line[3:])
            wlog.write("[stdout] " + line)
            wlog.flush()

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

        args, _ = ob.parse_args(["--api", "chat", "--rates", "inf", "--workload", "serving", "--repeats", str(NMAX),
                                 "--client-processes", "4", "--no-progress", "--base-url", url,
                                 "--out", os.path.join(R, "unused.json")])
        model, root = ob.served_model(url, None, None)
        root = ob.local_root(root)
        vocab = ob.vocab_size(args, root)
        target = Target(url, model, "chat", None, args.temperature, args.request_timeout, chat_words(root))
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
        warm = [ob.BenchRequest(ob.random_ids(__import__("random").Random("warm-up requests"), 16, vocab), 8)
                for _ in range(2)]
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
        try:
            worker.stdin.write("quit\n")
            worker.stdin.flush()
            worker.wait(15)
        except Exception as e:  # noqa: BLE001
            log(f"worker quit: {e!r}; killing pid {worker.pid}")
            worker.kill()
        code = srv.stop(timeout=15)
        log(f"server stopped (exit {code}), worker exit {worker.poll()}")
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
