"""The server at rate inf against its offline engine, four arms interleaved in one call, with CPU
accounting and CPU affinity changed live (where the server's 10-12% against its engine goes).

Like pairs.py: one server (python -m minisgl, --num-pages PAGES) and one offline engine process
(offline_worker.py) stay up side by side. Each round runs four arms, in a Williams-square order
(balanced for first-order carry-over):
  E   the offline engine as is (every CPU)
  S   the server as is (every CPU), 4 client processes, chat API, fresh ids
  P   the server with the scheduler's main thread alone on CPU X, X's hyperthread siblings left idle,
      and every other thread (the scheduler's others, API, tokenizers, detokenizer, forkserver, the
      offline engine, this driver and the client processes it spawns) on the other CPUs
  EP  the offline engine with its main thread alone on X the same way
The affinity is restored to every CPU after each pinned arm. Around each arm: /proc/stat (per CPU,
steal), utime+stime of every tracked process, and per thread of the scheduler and the engine:
utime/stime, schedstat (run ns, run-queue wait ns, slices), context switches, migrations.
Env: T0, DEADLINE, R, MODEL, PAGES, ROUNDS (max rounds).
"""

import json
import multiprocessing as mp
import os
import re
import statistics
import subprocess
import sys
import time

from harness import (
    chat_target,
    clock,
    driver_env,
    fresh_requests,
    load_online_bench,
    recorder,
    serving_args,
    start_engine_and_server,
    stop_engine_and_server,
    warm_requests,
)

ARMS = ["E", "S", "P", "EP"]
WILLIAMS = [[0, 1, 3, 2], [1, 2, 0, 3], [2, 3, 1, 0], [3, 0, 2, 1]]
HZ = os.sysconf("SC_CLK_TCK")


# -- /proc ---------------------------------------------------------------------------------------

def parse_cpulist(s):
    out = set()
    for part in s.strip().split(","):
        if not part:
            continue
        if "-" in part:
            a, b = part.split("-")
            out.update(range(int(a), int(b) + 1))
        else:
            out.add(int(part))
    return out


def read_stat(path):
    """(comm, fields from field 3 on) of /proc/.../stat, or None."""
    try:
        s = open(path).read()
    except OSError:
        return None
    i = s.rfind(")")
    return s[s.find("(") + 1:i], s[i + 2:].split()


def proc_cpu(pid):
    st = read_stat(f"/proc/{pid}/stat")
    if st is None:
        return None
    f = st[1]  # field n is f[n-3]
    return {"comm": st[0], "pgrp": int(f[2]), "ut": int(f[11]), "st": int(f[12]), "threads": int(f[17])}


def tids(pid):
    try:
        return [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return []


def thread_info(pid):
    out = {}
    for tid in tids(pid):
        base = f"/proc/{pid}/task/{tid}"
        st = read_stat(base + "/stat")
        if st is None:
            continue
        f = st[1]
        d = {"comm": st[0], "ut": int(f[11]), "st": int(f[12]), "cpu": int(f[36])}
        try:
            run, wait, slices = open(base + "/schedstat").read().split()
            d.update(run_ns=int(run), wait_ns=int(wait), slices=int(slices))
        except (OSError, ValueError):
            pass
        try:
            for line in open(base + "/status"):
                if line.startswith("voluntary_ctxt_switches"):
                    d["nvcsw"] = int(line.split()[1])
                elif line.startswith("nonvoluntary_ctxt_switches"):
                    d["nivcsw"] = int(line.split()[1])
                elif line.startswith("Cpus_allowed_list"):
                    d["allowed"] = line.split()[1]
        except OSError:
            pass
        try:
            for line in open(base + "/sched"):
                if line.startswith("se.nr_migrations"):
                    d["migr"] = int(line.split(":")[1])
                elif line.startswith("nr_involuntary_switches"):
                    pass
        except OSError:
            pass
        out[tid] = d
    return out


def sys_stat():
    cpus = {}
    for line in open("/proc/stat"):
        if line.startswith("cpu"):
            p = line.split()
            cpus[p[0]] = [int(x) for x in p[1:]]
    return cpus


def cpu_mhz():
    try:
        return [float(line.split(":")[1]) for line in open("/proc/cpuinfo") if line.startswith("cpu MHz")]
    except OSError:
        return []


def snapshot(procs, detail):
    snap = {"mono": time.monotonic(), "stat": sys_stat(), "procs": {}, "threads": {}}
    for pid in procs:
        c = proc_cpu(pid)
        if c is not None:
            snap["procs"][str(pid)] = c
    for pid in detail:
        snap["threads"][str(pid)] = {str(k): v for k, v in thread_info(pid).items()}
    return snap


def busy(v):
    # user nice system idle iowait irq softirq steal guest guest_nice
    return v[0] + v[1] + v[2] + v[5] + v[6]


def summary(a, b, roles, main_tids):
    """What an arm's two snapshots say, seconds (and busy cores over the window)."""
    dt = b["mono"] - a["mono"]
    out = {"window_s": dt}
    sa, sb = a["stat"], b["stat"]
    tot = [y - x for x, y in zip(sa["cpu"], sb["cpu"])]
    out["busy_cores"] = busy(tot) / HZ / dt
    out["steal_s"] = tot[7] / HZ if len(tot) > 7 else None
    out["iowait_s"] = tot[4] / HZ
    per = {}
    for k in sb:
        if k != "cpu" and k in sa:
            d = [y - x for x, y in zip(sa[k], sb[k])]
            per[k[3:]] = round(busy(d) / HZ / dt, 3)
    out["busy_per_cpu"] = per
    cpu = {}
    for pid, role in roles.items():
        x, y = a["procs"].get(str(pid)), b["procs"].get(str(pid))
        if x and y:
            cpu[role] = cpu.get(role, 0.0) + (y["ut"] + y["st"] - x["ut"] - x["st"]) / HZ
    out["cpu_s"] = {k: round(v, 3) for k, v in cpu.items()}
    th = {}
    for pid, mt in main_tids.items():
        ta, tb = a["threads"].get(str(pid), {}), b["threads"].get(str(pid), {})
        role = roles.get(pid, str(pid))
        rest_cpu = 0.0
        for tid, y in tb.items():
            x = ta.get(tid)
            if x is None:
                continue
            c = (y["ut"] + y["st"] - x["ut"] - x["st"]) / HZ
            if int(tid) == mt:
                th[role + ".main"] = {
                    "cpu_s": round(c, 3), "ut_s": (y["ut"] - x["ut"]) / HZ, "st_s": (y["st"] - x["st"]) / HZ,
                    "run_s": round((y.get("run_ns", 0) - x.get("run_ns", 0)) / 1e9, 3),
                    "rq_wait_s": round((y.get("wait_ns", 0) - x.get("wait_ns", 0)) / 1e9, 4),
                    "slices": y.get("slices", 0) - x.get("slices", 0),
                    "nvcsw": y.get("nvcsw", 0) - x.get("nvcsw", 0), "nivcsw": y.get("nivcsw", 0) - x.get("nivcsw", 0),
                    "migr": y.get("migr", 0) - x.get("migr", 0) if "migr" in y else None,
                    "allowed": y.get("allowed"), "last_cpu": y["cpu"]}
            else:
                rest_cpu += c
        th[role + ".other_threads_cpu_s"] = round(rest_cpu, 3)
        busiest = sorted(((y["ut"] + y["st"] - ta[t]["ut"] - ta[t]["st"], y["comm"]) for t, y in tb.items()
                          if t in ta and int(t) != mt), reverse=True)[:4]
        th[role + ".busiest_threads"] = [(n, round(c / HZ, 3)) for c, n in busiest if c > 0]
    out["threads"] = th
    out["mhz_mean"] = round(statistics.fmean(cpu_mhz() or [0.0]), 1)
    return out


# -- affinity ------------------------------------------------------------------------------------

class Stop(Exception):
    pass


def set_aff_threads(pid, cpus, only=None, skip=None):
    n = 0
    for tid in tids(pid):
        if (only is not None and tid != only) or (skip is not None and tid == skip):
            continue
        try:
            os.sched_setaffinity(tid, cpus)
            n += 1
        except OSError:
            pass
    return n


def main():
    T0, DEADLINE, R, MODEL, PAGES = driver_env(deadline=540)
    ROUNDS = int(os.environ.get("ROUNDS", "16"))
    TAIL = 22.0

    el, log = clock(T0)

    FULL = os.sched_getaffinity(0)
    X = max(FULL)
    try:
        sib = parse_cpulist(open(f"/sys/devices/system/cpu/cpu{X}/topology/thread_siblings_list").read())
    except OSError:
        sib = {X}
    RESERVED = sib | {X}
    OTHERS = FULL - RESERVED
    log(f"cpus {sorted(FULL)}; X={X}, siblings {sorted(sib)}, others {sorted(OTHERS)}")

    ob = load_online_bench()
    from minisgl.benchmark import sse_client as sc
    from minisgl.benchmark.online import summarize

    record = recorder(R)

    worker, wreply, srv, url = start_engine_and_server(R, MODEL, PAGES, log)

    roles, detail, main_tids = {}, [], {}

    def discover():
        """Every process of the server's group (named by the server log), the engine, this driver."""
        roles.clear()
        names = {int(m.group(2)): m.group(1) for m in
                 re.finditer(r"started worker (\S+) \(pid (\d+)\)", open(os.path.join(R, "server.log")).read())}
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            c = proc_cpu(int(d))
            if c and c["pgrp"] == srv.proc.pid:
                pid = int(d)
                roles[pid] = "api" if pid == srv.proc.pid else names.get(pid, "srv-" + c["comm"])
        roles[worker.pid] = "engine"
        roles[os.getpid()] = "driver"
        sched = [p for p, r in roles.items() if r == "scheduler"]
        if not sched:  # the log did not name it: the group's process on the GPU
            q = subprocess.run(["nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader"],
                               capture_output=True, text=True).stdout.split()
            sched = [int(p) for p in q if p.isdigit() and int(p) in roles and int(p) != srv.proc.pid][:1]
            for p in sched:
                roles[p] = "scheduler"
            log(f"scheduler found on the GPU: {sched}")
        detail[:] = sched + [worker.pid]
        main_tids.clear()
        for p in detail:
            main_tids[p] = p
        return sched[0] if sched else None

    def pin(kind):
        """kind: None (every CPU), 'server' or 'engine' (that one's main thread alone on X)."""
        n = 0
        for pid, role in list(roles.items()):
            if kind is None:
                n += set_aff_threads(pid, FULL)
            elif (kind == "server" and role == "scheduler") or (kind == "engine" and role == "engine"):
                n += set_aff_threads(pid, {X}, only=pid)
                n += set_aff_threads(pid, OTHERS, skip=pid)
            else:
                n += set_aff_threads(pid, OTHERS)
        return n

    def offline(k, label):
        a = snapshot(roles, detail)
        t0 = time.monotonic()
        worker.stdin.write(f"run {k}\n")
        worker.stdin.flush()
        r = wreply()
        t1 = time.monotonic()
        b = snapshot(roles, detail)
        s = summary(a, b, roles, main_tids)
        r.update(arm=label, mono_start=t0, mono_end=t1, elapsed_end=el(), cpu=s)
        record({**r, "snap_a": a, "snap_b": b})
        log(f"{label} run {k}: {r['requests']} requests, {r['output_tokens']} tokens in {r['seconds']:.2f} s = "
            f"{r['tokens_per_s']:.1f} tok/s | {brief(s, 'engine')}")
        return r

    def brief(s, who):
        m = s["threads"].get(who + ".main") or {}
        return (f"busy {s['busy_cores']:.2f} cores, steal {s['steal_s']:.2f} s, cpu {s['cpu_s']}, main: cpu "
                f"{m.get('cpu_s')} rq_wait {m.get('rq_wait_s')} nvcsw {m.get('nvcsw')} nivcsw {m.get('nivcsw')} "
                f"migr {m.get('migr')} allowed {m.get('allowed')}")

    def burst(target, reqs, label, i):
        """sse_client.run_requests with snapshots at the go and at the last result."""
        processes = 4
        ctx = mp.get_context("spawn")
        out, go, start_at = ctx.Queue(), ctx.Event(), ctx.Value("d", 0.0)
        shares = [[(j, r) for j, r in enumerate(reqs) if j % processes == k] for k in range(processes)]
        procs = [ctx.Process(target=sc._client_process, args=(target, share, None, go, start_at, out), daemon=True)
                 for share in shares]
        ch0 = os.times()
        for p in procs:
            p.start()
        results = [None] * len(reqs)
        try:
            ready = 0
            while ready < processes:
                kind, _ = sc._get(out, procs)
                ready += kind == "ready"
            cl0 = sum((lambda c: c["ut"] + c["st"] if c else 0)(proc_cpu(p.pid)) for p in procs) / HZ
            a = snapshot(roles, detail)
            start_at.value = time.monotonic() + 0.05
            go.set()
            finished = 0
            while finished < processes:
                kind, value = sc._get(out, procs)
                if kind == "results":
                    finished += 1
                    for j, r in value:
                        results[j] = r
            b = snapshot(roles, detail)
        finally:
            for p in procs:
                p.join(5)
                if p.is_alive():
                    p.kill()
        ch1 = os.times()
        done = [r for r in results if r is not None]
        end = max((r.end for r in done), default=start_at.value)
        seconds = end - start_at.value
        s = summary(a, b, roles, main_tids)
        s["cpu_s"]["clients"] = round(ch1.children_user + ch1.children_system - ch0.children_user
                                      - ch0.children_system - cl0, 3)
        s["clients_startup_cpu_s"] = round(cl0, 3)
        row = {"peak_in_flight": sc.peak_in_flight(done), **summarize(done, seconds)}
        first_send = min((r.start for r in done), default=start_at.value)
        row.update(arm=label, run_index=i, elapsed_end=el(), mono_start=start_at.value, mono_first_send=first_send,
                   mono_end=end, cpu=s)
        record({**row, "snap_a": a, "snap_b": b})
        log(f"{label} [{i}]: {row['completed']}/{row['requests']} done, {row['failed']} failed, "
            f"{row['output_tokens']}/{row['expected_output_tokens']} tokens, {row['input_tokens']} prompt tokens, "
            f"{seconds:.2f} s = {row['output_throughput']:.1f} tok/s, TTFT p50 {row['ttft_ms']['p50']} | {brief(s, 'scheduler')}")
        return row

    stopped = False
    rows = []
    try:
        init = wreply()
        record({"arm": "offline-init", **init})
        log(f"offline engine up: {init['num_pages']} pages x {init['page_size']}, init {init['init_s']:.1f} s")
        offline(0, "E-warm")  # bench.py's unmeasured run (overlaps the server's start)
        srv.wait_ready(max(30.0, DEADLINE - TAIL - el()))
        log("server ready")
        discover()
        log(f"roles {roles}")
        subprocess.run("ps -eLo pid,tid,pgid,psr,pcpu,comm,args --sort=pid > " + os.path.join(R, "ps-threads.txt"),
                       shell=True)

        args = serving_args(ob, url, R)
        target, vocab = chat_target(ob, args, url)
        runs = ob.workloads(args, vocab)
        reqs_of = fresh_requests(ob, args, runs, vocab)
        warm = warm_requests(ob, vocab)
        sc.run_requests(target, warm, processes=4, progress=False)
        burst(target, ob.warmup_burst(runs, vocab), "S-warm", -1)
        discover()  # the tokenizers' helper processes, if any, now exist
        log(f"roles {roles}")

        est = {"E": 12.0, "S": 16.0, "P": 16.0, "EP": 12.0}
        nxt = {"off": 1, "on": 0}
        for rnd in range(ROUNDS):
            order = [ARMS[j] for j in WILLIAMS[rnd % 4]]
            for arm in order:
                if el() + est[arm] + TAIL > DEADLINE:
                    raise Stop(f"before round {rnd + 1} arm {arm}: {el():.0f} s + {est[arm]:.0f} s + "
                                        f"{TAIL:.0f} s > {DEADLINE:.0f} s")
                t = time.time()
                if arm in ("E", "EP"):
                    n = pin("engine" if arm == "EP" else None)
                    k = nxt["off"]
                    nxt["off"] += 1
                    r = offline(k, arm)
                    rows.append({"round": rnd + 1, "arm": arm, "tok_s": r["tokens_per_s"], "s": r["seconds"],
                                 "tokens": r["output_tokens"], "cpu": r["cpu"]})
                else:
                    i = nxt["on"]
                    nxt["on"] += 1
                    reqs = reqs_of(i)
                    n = pin("server" if arm == "P" else None)  # the clients inherit the driver's mask
                    r = burst(target, reqs, arm, i)
                    rows.append({"round": rnd + 1, "arm": arm, "tok_s": r["output_throughput"], "s": r["duration_s"],
                                 "tokens": r["output_tokens"], "done": f"{r['completed']}/{r['requests']}",
                                 "cpu": r["cpu"], "mono_start": r["mono_start"], "mono_end": r["mono_end"]})
                if arm in ("P", "EP"):
                    pin(None)
                est[arm] = max(est[arm] if rnd else 0.0, time.time() - t)
                log(f"round {rnd + 1} arm {arm} took {time.time() - t:.1f} s ({n} threads re-pinned)")
    except Stop as e:
        log(f"stopping {e}")
    finally:
        try:
            pin(None)
        except Exception:  # noqa: BLE001
            pass
        stop_engine_and_server(worker, srv, log)
        stopped = True

    json.dump({"X": X, "siblings": sorted(sib), "others": sorted(OTHERS), "rows": rows},
              open(os.path.join(R, "quads.json"), "w"), indent=1)
    by = {a: [r for r in rows if r["arm"] == a] for a in ARMS}
    print("\n| round | " + " | ".join(f"{a} tok/s" for a in ARMS) + " | S/E | P/E | EP/E | P/S |")
    print("|---" * 9 + "|")
    rounds = sorted({r["round"] for r in rows})
    for rd in rounds:
        v = {r["arm"]: r["tok_s"] for r in rows if r["round"] == rd}
        cells = [f"{v[a]:.0f}" if a in v else "-" for a in ARMS]
        rat = [f"{v[x] / v[y]:.3f}" if x in v and y in v else "-" for x, y in
               (("S", "E"), ("P", "E"), ("EP", "E"), ("P", "S"))]
        print(f"| {rd} | " + " | ".join(cells + rat) + " |")
    means = {a: statistics.fmean([r["tok_s"] for r in by[a]]) for a in ARMS if by[a]}
    print("means", {a: round(m, 1) for a, m in means.items()})
    for x, y in (("S", "E"), ("P", "E"), ("EP", "E"), ("P", "S")):
        if x in means and y in means:
            print(f"ratio of means {x}/{y}: {means[x] / means[y]:.4f}")
    return 0 if stopped and rows else 1


if __name__ == "__main__":
    sys.exit(main())
