"""The message codec's change (5a27469: field values read with operator.attrgetter, flat-message lists
built with starmap) on the server, base against head, in one call.

Two servers stay up side by side on one GPU (python -m minisgl --dummy-weight --num-pages PAGES):
  B  the base tree's package ($BASE_PATH first on PYTHONPATH), port 1931, probe folder $R/probe-B
  H  this tree's package, port 1932, probe folder $R/probe-H
Both run with PYTHONSAFEPATH=1, so `python -m` puts no working directory ahead of PYTHONPATH, and with
the step probe plus a record of which message/base.py each process imported (codec_probe/).
After both are ready and each has served the 2 warm-up requests and bench.py's warm-up burst, bursts of
the serving workload at rate inf (benchmark/online/bench.py's run n, --api chat, fresh ids, 4 client
processes) alternate B H H B B H H B ...; each server's n-th burst is run n, so B and H see the same
requests and neither sees a prompt twice. Per burst: output tok/s and, from the scheduler's probe rows
inside the burst's window, send and recv ms per step, step counts, the loop's busy seconds, and the
scheduler process's CPU seconds.
Env: T0, DEADLINE, R, MODEL, PAGES, BASE_PATH, OUT (partial results copied there after each burst).
"""

import csv
import glob
import json
import os
import shutil
import statistics
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import quads  # noqa: E402  (its /proc helpers)
from harness import chat_target, clock, driver_env, fresh_requests, load_online_bench, serving_args, warm_requests  # noqa: E402

ORDER = ["B", "H", "H", "B"]
PORTS = {"B": 1931, "H": 1932}


def main():
    T0, DEADLINE, R, MODEL, PAGES = driver_env(deadline=500, pages=16384)
    BASE_PATH = os.environ["BASE_PATH"]
    OUT = os.environ.get("OUT")
    TAIL = 20.0
    here = os.path.dirname(os.path.abspath(__file__))
    probe_dir = os.path.join(here, "codec_probe")
    repo = os.getcwd()
    site = [p for p in os.environ.get("PYTHONPATH", "").split(":") if p and "step_probe" not in p
            and "codec_probe" not in p]

    el, log = clock(T0)

    ob = load_online_bench()
    from minisgl.benchmark import sse_client as sc
    from minisgl.benchmark.online import summarize
    from minisgl.benchmark.server_process import ServerProcess

    records = open(os.path.join(R, "records.jsonl"), "w")
    srv, pdir = {}, {}
    for arm in ("B", "H"):
        pdir[arm] = os.path.join(R, f"probe-{arm}")
        os.makedirs(pdir[arm], exist_ok=True)
        pp = [probe_dir] + ([BASE_PATH] if arm == "B" else []) + site + ([repo] if repo not in site else [])
        env = {"PYTHONPATH": ":".join(pp), "PROBE_DIR": pdir[arm], "PYTHONSAFEPATH": "1"}
        cmd = [sys.executable, "-m", "minisgl", "--model", MODEL, "--dummy-weight", "--num-pages", str(PAGES),
               "--host", "127.0.0.1", "--port", str(PORTS[arm])]
        srv[arm] = ServerProcess(cmd, f"http://127.0.0.1:{PORTS[arm]}", os.path.join(R, f"server-{arm}.log"),
                                 env=env, command=True)
        open(os.path.join(R, f"server-{arm}.pid"), "w").write(str(srv[arm].proc.pid))
        log(f"started {arm} pid {srv[arm].proc.pid} PYTHONPATH={env['PYTHONPATH']}")

    # The codec microbenchmark on this host's CPU, both codecs in turns, while the servers start.
    def codec_bench():
        import subprocess
        with open(os.path.join(R, "message_codec.log"), "w") as f:
            subprocess.run([sys.executable, "benchmark/offline/message_codec.py", "--batches", "64,207,512",
                            "--baseline", BASE_PATH, "--out", os.path.join(R, "message_codec.json")],
                           stdout=f, stderr=subprocess.STDOUT, timeout=120)
    cb = threading.Thread(target=codec_bench, daemon=True)
    cb.start()

    sched_pid = {}

    def find_sched(arm):
        for f in glob.glob(os.path.join(pdir[arm], "role-*.txt")):
            if open(f).read().startswith("worker scheduler"):
                return int(f.rsplit("-", 1)[1].split(".")[0])
        files = glob.glob(os.path.join(pdir[arm], "steps-*.csv"))  # else the process that logged most steps
        return int(max(files, key=os.path.getsize).rsplit("-", 1)[1].split(".")[0]) if files else None

    def trees(arm):
        out = {}
        for f in sorted(glob.glob(os.path.join(pdir[arm], "tree-*.txt"))):
            pid = f.rsplit("-", 1)[1].split(".")[0]
            role = open(os.path.join(pdir[arm], f"role-{pid}.txt")).read().strip()[:60] \
                if os.path.exists(os.path.join(pdir[arm], f"role-{pid}.txt")) else "?"
            out[f"{pid} ({role})"] = open(f).read().strip()
        return out

    def steps(arm):
        pid = sched_pid[arm]
        path = os.path.join(pdir[arm], f"steps-{pid}.csv")
        rows = list(csv.DictReader(open(path)))
        return [{k: (v if k == "phase" else float(v)) for k, v in r.items()} for r in rows]

    def cpu_of(pid):
        c = quads.proc_cpu(pid)
        return (c["ut"] + c["st"]) / quads.HZ if c else None

    rows = []

    def analyse(arm, label, a, b, res, i):
        time.sleep(0.3)  # the scheduler's idle turn flushes its rows
        sr = [r for r in steps(arm) if a <= r["t"] <= b]
        pre = [r for r in sr if r["phase"] == "p"]
        dec = [r for r in sr if r["phase"] == "d"]
        n = len(sr)
        send = sum(r["send_ms"] for r in sr)
        recv = sum(r["recv_ms"] for r in sr)
        row = {"arm": arm, "label": label, "run": i, "tok_s": res["output_throughput"], "s": res["duration_s"],
               "done": f"{res['completed']}/{res['requests']}", "out_tokens": res["output_tokens"],
               "steps": n, "prefills": len(pre), "decodes": len(dec),
               "send_ms_per_step": send / n if n else None, "recv_ms_per_step": recv / n if n else None,
               "send_s": send / 1000, "recv_s": recv / 1000,
               "send_ms_per_decode": statistics.fmean(r["send_ms"] for r in dec) if dec else None,
               "send_ms_decode_p50": statistics.median(r["send_ms"] for r in dec) if dec else None,
               "loop_busy_s": sum(r["turn_ms"] for r in sr) / 1000,
               "decode_turn_p50_ms": statistics.median(r["turn_ms"] for r in dec) if dec else None,
               "mean_decode_bs": statistics.fmean(r["bs"] for r in dec) if dec else None,
               "preempt": sum(r["preempt"] for r in sr), "gc_ms": sum(r["gc_ms"] for r in sr),
               "ttft_p50_ms": res["ttft_ms"]["p50"], "sched_cpu_s": res.get("sched_cpu_s"),
               "elapsed_end": el()}
        return row

    def fm(x, spec=".4f"):
        return "-" if x is None else format(x, spec)

    def burst(arm, target, reqs, label, i):
        pid = sched_pid[arm]
        c0 = cpu_of(pid)
        a = time.monotonic()
        done, seconds, peak = sc.run_requests(target, reqs, processes=4, progress=False)
        b = time.monotonic()
        c1 = cpu_of(pid)
        res = {"peak_in_flight": peak, **summarize(done, seconds)}
        res["sched_cpu_s"] = round(c1 - c0, 3) if c0 is not None and c1 is not None else None
        row = analyse(arm, label, a, b, res, i)
        records.write(json.dumps({**row, "result": res, "mono": [a, b]}) + "\n")
        records.flush()
        log(f"{label} {arm} [run {i}]: {row['done']} done, {row['out_tokens']} tok, {row['s']:.2f} s = "
            f"{row['tok_s']:.1f} tok/s | steps {row['steps']} (p {row['prefills']}, d {row['decodes']}), "
            f"send {fm(row['send_ms_per_step'])} ms/step ({row['send_s']:.3f} s; decode mean "
            f"{fm(row['send_ms_per_decode'])}, p50 {fm(row['send_ms_decode_p50'])}), recv "
            f"{fm(row['recv_ms_per_step'])} ms/step, loop busy {row['loop_busy_s']:.2f} s, sched cpu "
            f"{row['sched_cpu_s']} s, decode bs {fm(row['mean_decode_bs'], '.1f')}, preempt {row['preempt']}")
        return row

    def report(final=False):
        lines = ["| # | arm | run | tok/s | s | send ms/step | send ms/decode | recv ms/step | send s | steps (p/d) "
                 "| loop busy s | sched cpu s | decode bs | preempt |", "|---" * 14 + "|"]
        for k, r in enumerate(rows):
            lines.append(f"| {k + 1} | {r['arm']} | {r['run']} | {r['tok_s']:.0f} | {r['s']:.2f} | "
                         f"{fm(r['send_ms_per_step'])} | {fm(r['send_ms_per_decode'])} | {fm(r['recv_ms_per_step'])}"
                         f" | {r['send_s']:.3f} | {r['steps']} ({r['prefills']}/{r['decodes']}) | "
                         f"{r['loop_busy_s']:.2f} | {r['sched_cpu_s']} | {fm(r['mean_decode_bs'], '.1f')} | "
                         f"{r['preempt']} |")
        by = {a: [r for r in rows if r["arm"] == a] for a in ("B", "H")}
        keys = ("tok_s", "s", "send_ms_per_step", "send_ms_per_decode", "send_ms_decode_p50", "recv_ms_per_step",
                "send_s", "recv_s", "steps", "prefills", "decodes", "loop_busy_s", "sched_cpu_s", "mean_decode_bs",
                "decode_turn_p50_ms")
        def mean(v, k):
            xs = [r[k] for r in v if r[k] is not None]
            return statistics.fmean(xs) if xs else None

        means = {a: {k: mean(v, k) for k in keys} for a, v in by.items() if v}
        lines.append("")
        for a, m in means.items():
            lines.append(f"mean {a} (n={len(by[a])}): " + ", ".join(f"{k} {fm(v, '.4g')}" for k, v in m.items()))
        if len(means) == 2:
            lines.append("H/B ratio of means: " + ", ".join(
                f"{k} {means['H'][k] / means['B'][k]:.4f}" for k in keys if means["B"][k] and means["H"][k] is not None))
            # ABBA blocks: B H H B -> each block's H/B from its own two of each (linear drift cancels)
            blocks = []
            for j in range(0, len(rows) - 3, 4):
                blk = rows[j:j + 4]
                hb = [r for r in blk if r["arm"] == "H"], [r for r in blk if r["arm"] == "B"]
                if len(hb[0]) == 2 and len(hb[1]) == 2:
                    blocks.append({k: statistics.fmean(r[k] for r in hb[0]) / statistics.fmean(r[k] for r in hb[1])
                                   for k in ("tok_s", "send_ms_per_step", "loop_busy_s")})
            if blocks:
                lines.append(f"ABBA blocks ({len(blocks)}) H/B: " + "; ".join(
                    f"{k} " + " ".join(f"{b[k]:.3f}" for b in blocks) + f" (median {statistics.median(b[k] for b in blocks):.4f})"
                    for k in ("tok_s", "send_ms_per_step", "loop_busy_s")))
            pairs = [(b["tok_s"], h["tok_s"]) for b, h in zip(by["B"], by["H"])]
            if len(pairs) > 1:
                rr = [h / b for b, h in pairs]
                lines.append(f"same-run pairs H/B tok/s: {' '.join(f'{x:.3f}' for x in rr)}; median "
                             f"{statistics.median(rr):.4f}, mean {statistics.fmean(rr):.4f}, sd {statistics.stdev(rr):.4f}")
        text = "\n".join(lines)
        open(os.path.join(R, "codec_ab.txt"), "w").write(text + "\n")
        json.dump({"rows": rows, "means": means}, open(os.path.join(R, "codec_ab.json"), "w"), indent=1)
        if OUT:
            for f in ("codec_ab.txt", "codec_ab.json", "driver.log"):
                try:
                    shutil.copy(os.path.join(R, f), os.path.join(OUT, f))
                except OSError:
                    pass
        if final:
            print(text, flush=True)

    try:
        for arm in ("B", "H"):
            srv[arm].wait_ready(max(30.0, DEADLINE - TAIL - el()))
            log(f"server {arm} ready")
        for arm in ("B", "H"):
            sched_pid[arm] = find_sched(arm)
            log(f"{arm}: scheduler pid {sched_pid[arm]}; imported codecs {json.dumps(trees(arm), indent=0)}")

        args = serving_args(ob, srv["H"].url, R)
        targets = {}
        for arm in ("B", "H"):
            targets[arm], vocab = chat_target(ob, args, srv[arm].url)
        runs = ob.workloads(args, vocab)
        reqs_of = fresh_requests(ob, args, runs, vocab)
        warm = warm_requests(ob, vocab)
        for arm in ("B", "H"):
            sc.run_requests(targets[arm], warm, processes=4, progress=False)
            w = burst(arm, targets[arm], ob.warmup_burst(runs, vocab), "warm", -1)
            records.write(json.dumps({"warm": w}) + "\n")
        nxt = {"B": 0, "H": 0}
        est = 15.0
        k = 0
        while True:
            arm = ORDER[k % 4]
            if el() + est + TAIL > DEADLINE:
                log(f"stopping before burst {k + 1} ({arm}): {el():.0f} s + {est:.0f} s + {TAIL:.0f} s > {DEADLINE:.0f} s")
                break
            t = time.time()
            i = nxt[arm]
            nxt[arm] += 1
            rows.append(burst(arm, targets[arm], reqs_of(i), f"#{k + 1}", i))
            est = max(est if k else 0.0, time.time() - t)
            k += 1
            try:
                report()
            except Exception as e:  # noqa: BLE001
                log(f"report failed: {e!r}")
    finally:
        for arm in srv:
            if srv[arm].proc.poll() is None:
                srv[arm].proc.send_signal(15)
        for arm in srv:
            code = srv[arm].stop(timeout=15)
            log(f"server {arm} stopped (exit {code})")
        for arm in srv:
            log(f"{arm} imported codecs at the end: {json.dumps(trees(arm), indent=0)}")
        cb.join(1)
    report(final=True)
    return 0 if rows else 1


if __name__ == "__main__":
    sys.exit(main())
