"""Two servers of this tree that differ only in flags, bursts alternating A B B A ..., in one call.

Both stay up side by side on one GPU (python -m minisgl --dummy-weight --num-pages PAGES, plus
FLAGS_A or FLAGS_B): A on port 1941, B on 1942. After each has served bench.py's two warm-up
requests and one unmeasured burst, bursts of the serving workload at rate inf (benchmark/online/bench.py's
run n, --api chat, fresh ids, 4 client processes) alternate A B B A B A A B ... until the deadline;
each server's n-th burst is run n - 1, so both see the same requests and neither sees a prompt twice.
Env: T0, DEADLINE, R, MODEL, PAGES (harness.driver_env), FLAGS_A, FLAGS_B (space-separated).
"""

import dataclasses
import json
import os
import shlex
import statistics
import sys
import time

from harness import chat_target, clock, driver_env, load_online_bench, serving_args, warm_requests

ORDER = ["A", "B", "B", "A"]
PORTS = {"A": 1941, "B": 1942}


def main():
    T0, DEADLINE, R, MODEL, PAGES = driver_env(deadline=500, pages=16384)
    flags = {arm: shlex.split(os.environ.get(f"FLAGS_{arm}", "")) for arm in PORTS}
    TAIL = 20.0
    el, log = clock(T0)
    ob = load_online_bench()
    from minisgl.benchmark import sse_client as sc
    from minisgl.benchmark.online import summarize
    from minisgl.benchmark.server_process import ServerProcess

    srv = {}
    for arm, port in PORTS.items():
        cmd = [sys.executable, "-m", "minisgl", "--model", MODEL, "--dummy-weight", "--num-pages", str(PAGES),
               "--host", "127.0.0.1", "--port", str(port), *flags[arm]]
        srv[arm] = ServerProcess(cmd, f"http://127.0.0.1:{port}", os.path.join(R, f"server-{arm}.log"), command=True)
        open(os.path.join(R, f"server-{arm}.pid"), "w").write(str(srv[arm].proc.pid))
        log(f"started {arm} pid {srv[arm].proc.pid}: {' '.join(cmd[3:])}")
    rows, records = [], open(os.path.join(R, "records.jsonl"), "w")
    try:
        for arm in PORTS:
            srv[arm].wait_ready(max(30.0, DEADLINE - TAIL - el()))
            log(f"{arm} ready")
        url = srv["A"].url
        args = serving_args(ob, url, R, repeats=int(os.environ.get("NMAX", "16")))
        target, vocab = chat_target(ob, args, url)
        targets = {arm: dataclasses.replace(target, base_url=srv[arm].url) for arm in PORTS}
        runs = ob.workloads(args, vocab)  # run i: fresh ids
        for arm in PORTS:
            sc.run_requests(targets[arm], warm_requests(ob, vocab), processes=1, progress=False)
            sc.run_requests(targets[arm], ob.warmup_burst(runs, vocab), processes=4, progress=False)
            log(f"{arm} warmed up")
        n = {arm: 0 for arm in PORTS}
        k, est = 0, 15.0
        while True:
            arm = ORDER[k % 4] if (k // 4) % 2 == 0 else ORDER[(k + 2) % 4]
            if el() + est + TAIL > DEADLINE or n[arm] >= len(runs):
                log(f"stopping before burst {k + 1}: {el():.0f} s + {est:.0f} s + {TAIL:.0f} s > {DEADLINE:.0f} s")
                break
            start = time.monotonic()
            done, seconds, _ = sc.run_requests(targets[arm], runs[n[arm]][2], processes=4, progress=False)
            n[arm] += 1
            est = max(est * 0.5, time.monotonic() - start + 1.0)
            res = summarize(done, seconds)
            rows.append({"arm": arm, "run": n[arm], "tok_s": res["output_throughput"], "s": res["duration_s"],
                         "done": f"{res['completed']}/{res['requests']}", "ttft_p50_ms": res["ttft_ms"]["p50"]})
            records.write(json.dumps({**rows[-1], "result": res}) + "\n")
            records.flush()
            log(f"burst {k + 1} {arm} run {n[arm]}: {rows[-1]['done']} done, {res['duration_s']:.2f} s = "
                f"{res['output_throughput']:.0f} tok/s, TTFT p50 {res['ttft_ms']['p50']:.0f} ms")
            k += 1
    finally:
        for arm in PORTS:
            srv[arm].stop()
    by = {arm: [r["tok_s"] for r in rows if r["arm"] == arm] for arm in PORTS}
    summary = {"flags": flags, "bursts": len(rows), **{f"{arm}_tok_s": by[arm] for arm in PORTS}}
    if by["A"] and by["B"]:
        summary["B_over_A_ratio_of_means"] = statistics.fmean(by["B"]) / statistics.fmean(by["A"])
        summary["B_over_A_ratio_of_medians"] = statistics.median(by["B"]) / statistics.median(by["A"])
    json.dump(summary, open(os.path.join(R, "flag_ab.json"), "w"), indent=1)
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
