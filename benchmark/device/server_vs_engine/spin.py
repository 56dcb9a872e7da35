"""The offline engine alone, with 0, 3 or 12 busy Python processes beside it (does
work on the VM's other vCPUs slow the host-bound scheduler thread, as the server's API, tokenizers,
detokenizer and benchmark clients, ~2 cores during a burst, might?). Arms rotate in all six orders:
  E0   the engine alone
  E3   the engine with 3 spinners (about the server burst's other busy cores)
  E12  the engine with 12 spinners (3 of the 16 vCPUs left idle: no run-queue contention in the VM)
A spinner is a Python loop of dict, str and json work, as an API or tokenizer process does. CPU
accounting (quads.py's snapshot/summary) around each run. Env: T0, DEADLINE, R, MODEL, PAGES.
"""

import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import clock, driver_env, start_offline_worker, stop_offline_worker  # noqa: E402
from quads import snapshot, summary  # noqa: E402

SPIN = ("import json\nd={}\nwhile True:\n    for i in range(2000):\n        d[str(i)]=[i,i*2,'abc'*3,{'k':i}]\n"
        "    json.loads(json.dumps(d))\n")
ORDERS = [[0, 1, 2], [1, 2, 0], [2, 0, 1], [0, 2, 1], [2, 1, 0], [1, 0, 2]]
ARMS = [("E0", 0), ("E3", 3), ("E12", 12)]


def main():
    T0, DEADLINE, R, MODEL, PAGES = driver_env(deadline=400)
    TAIL = 12.0

    el, log = clock(T0)

    records = open(os.path.join(R, "records.jsonl"), "w")
    worker, wreply = start_offline_worker(R, MODEL, PAGES)

    roles = {worker.pid: "engine", os.getpid(): "driver"}
    log(f"roles {roles}")
    spinners = []

    def spin(n):
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # no probe in the spinners
        for _ in range(n):
            p = subprocess.Popen([sys.executable, "-c", SPIN], env=env)
            spinners.append(p)
            roles[p.pid] = "spinners"
        time.sleep(0.3 if n else 0.0)  # their start-up done

    def unspin():
        for p in spinners:
            p.kill()
        for p in spinners:
            p.wait()
            roles.pop(p.pid, None)
        spinners.clear()

    def offline(k, label):
        a = snapshot(roles, [worker.pid])
        t0 = time.monotonic()
        worker.stdin.write(f"run {k}\n")
        worker.stdin.flush()
        r = wreply()
        t1 = time.monotonic()
        b = snapshot(roles, [worker.pid])
        s = summary(a, b, roles, {worker.pid: worker.pid})
        r.update(arm=label, mono_start=t0, mono_end=t1, elapsed_end=el(), cpu=s)
        record = {**r, "snap_a": a, "snap_b": b}
        records.write(json.dumps(record) + "\n")
        records.flush()
        m = s["threads"].get("engine.main", {})
        log(f"{label} run {k}: {r['tokens_per_s']:.1f} tok/s in {r['seconds']:.2f} s | busy {s['busy_cores']:.2f} "
            f"cores, steal {s['steal_s']:.2f} s, cpu {s['cpu_s']}, main cpu {m.get('cpu_s')} rq_wait "
            f"{m.get('rq_wait_s')} nivcsw {m.get('nivcsw')} migr {m.get('migr')}")
        return r

    rows = []
    try:
        init = wreply()
        log(f"offline engine up: init {init['init_s']:.1f} s")
        offline(0, "E-warm")
        k, est = 1, 12.0
        for rnd in range(100):
            for j in ORDERS[rnd % 6]:
                label, n = ARMS[j]
                if el() + est + TAIL > DEADLINE:
                    raise TimeoutError(f"before round {rnd + 1} arm {label}")
                t = time.time()
                spin(n)
                try:
                    r = offline(k, label)
                finally:
                    unspin()
                k += 1
                est = max(est, time.time() - t)
                rows.append({"round": rnd + 1, "arm": label, "tok_s": r["tokens_per_s"], "s": r["seconds"],
                             "cpu": r["cpu"]})
    except TimeoutError as e:
        log(f"stopping {e}")
    finally:
        unspin()
        stop_offline_worker(worker, log, timeout=10)
    json.dump(rows, open(os.path.join(R, "spin.json"), "w"), indent=1)
    print("\n| round | E0 | E3 | E12 | E3/E0 | E12/E0 |")
    for rd in sorted({r["round"] for r in rows}):
        v = {r["arm"]: r["tok_s"] for r in rows if r["round"] == rd}
        cell = [f"{v[a]:.0f}" if a in v else "-" for a in ("E0", "E3", "E12")]
        rat = [f"{v[x] / v['E0']:.3f}" if x in v and "E0" in v else "-" for x in ("E3", "E12")]
        print(f"| {rd} | " + " | ".join(cell + rat) + " |")
    means = {a: statistics.fmean([r["tok_s"] for r in rows if r["arm"] == a]) for a in ("E0", "E3", "E12")
             if any(r["arm"] == a for r in rows)}
    print("means", {a: round(m) for a, m in means.items()})
    for x in ("E3", "E12"):
        if x in means and "E0" in means:
            print(f"ratio of means {x}/E0: {means[x] / means['E0']:.4f}")
    return 0 if rows else 1


if __name__ == "__main__":
    sys.exit(main())
