"""Reads `accounted.sh quads`'s unpacked results (argv[1], the r/ folder): per arm window, the step probe's rows
of the scheduler (server arms) or the engine (offline arms), and the CPU accounting from records."""

import csv
import json
import os
import statistics
import sys


def main():
    R = sys.argv[1]
    recs = [json.loads(line) for line in open(os.path.join(R, "records.jsonl"))]
    pids = {}
    for line in open(os.path.join(R, "driver.log")):
        if "roles {" in line:
            pids = eval(line[line.index("{"):])  # noqa: S307 (our own log)
    sched = next((p for p, r in pids.items() if r == "scheduler"), None)
    eng = next(p for p, r in pids.items() if r == "engine")
    steps = {}
    for pid in (sched, eng) if sched else (eng,):
        rows = list(csv.DictReader(open(os.path.join(R, "probe", f"steps-{pid}.csv"))))
        steps[pid] = [{k: (v if k == "phase" else float(v)) for k, v in r.items()} for r in rows]
    out = []
    for rec in recs:
        arm = rec.get("arm")
        if arm in (None, "offline-init"):
            continue
        a, b = rec.get("mono_start"), rec.get("mono_end")
        if a is None:
            continue
        pid = eng if arm.startswith("E") else sched
        rows = [r for r in steps[pid] if a <= r["t"] <= b + 0.1]
        if not rows:
            continue
        pre = [r for r in rows if r["phase"] == "p"]
        dec = [r for r in rows if r["phase"] == "d"]
        msg_rows = [r for r in rows if r["msgs"] > 0]
        first_step, last_end = rows[0]["t"], rows[-1]["t"] + rows[-1]["turn_ms"] / 1000
        busy = sum(r["turn_ms"] for r in rows) / 1000
        tok = rec.get("tokens_per_s") or rec.get("output_throughput")
        secs = rec.get("seconds") or rec.get("duration_s")
        c = rec["cpu"]
        m = c["threads"].get(("engine" if arm.startswith("E") else "scheduler") + ".main", {})
        d = {
            "arm": arm, "tok_s": round(tok), "s": round(secs, 2),
            "first_step_after_start_s": round(first_step - a, 3),
            "last_msg_after_start_s": round(msg_rows[-1]["t"] - a, 3) if msg_rows else None,
            "msgs": int(sum(r["msgs"] for r in rows)),
            "turns": len(rows), "prefills": len(pre), "decodes": len(dec),
            "prefills_before_last_msg": sum(1 for r in pre if msg_rows and r["t"] <= msg_rows[-1]["t"]),
            "loop_busy_s": round(busy, 3), "span_s": round(last_end - first_step, 3),
            "prefill_s": round(sum(r["turn_ms"] for r in pre) / 1000, 3),
            "decode_s": round(sum(r["turn_ms"] for r in dec) / 1000, 3),
            "prefill_med_ms": round(statistics.median(r["turn_ms"] for r in pre), 2) if pre else None,
            "prefill_fwd_med_ms": round(statistics.median(r["fwd_ms"] for r in pre), 2) if pre else None,
            "decode_med_ms": round(statistics.median(r["turn_ms"] for r in dec), 3) if dec else None,
            "decode_fwd_med_ms": round(statistics.median(r["fwd_ms"] for r in dec), 3) if dec else None,
            "decode_sync_med_ms": round(statistics.median(r["sync_ms"] for r in dec), 3) if dec else None,
            "decode_sched_med_ms": round(statistics.median(r["sched_ms"] for r in dec), 3) if dec else None,
            "decode_proc_med_ms": round(statistics.median(r["proc_ms"] for r in dec), 3) if dec else None,
            "sum_s": {k: round(sum(r[k] for r in rows) / 1000, 3) for k in
                      ("fwd_ms", "sync_ms", "proc_ms", "sched_ms", "send_ms", "recv_ms", "evict_ms", "gc_ms")},
            "mean_decode_bs": round(statistics.fmean(r["bs"] for r in dec), 1) if dec else None,
            "ptok": int(sum(r["ptok"] for r in rows)),
            "main_cpu_s": m.get("cpu_s"), "main_sys_s": m.get("st_s"), "main_rq_wait_s": m.get("rq_wait_s"),
            "main_nvcsw": m.get("nvcsw"), "main_nivcsw": m.get("nivcsw"),
            "busy_cores": round(c["busy_cores"], 2), "steal_s": c["steal_s"], "cpu_s": c["cpu_s"],
            "main_per_cpu_busy": c["busy_per_cpu"],
        }
        out.append(d)
    json.dump(out, open(os.path.join(R, "analysis.json"), "w"), indent=1)
    cols = ["arm", "tok_s", "s", "span_s", "loop_busy_s", "main_cpu_s", "main_sys_s", "prefills", "decodes",
            "prefill_s", "decode_s", "prefill_med_ms", "prefill_fwd_med_ms", "decode_med_ms", "decode_fwd_med_ms",
            "decode_sync_med_ms", "decode_sched_med_ms", "decode_proc_med_ms", "first_step_after_start_s",
            "last_msg_after_start_s", "prefills_before_last_msg", "ptok", "busy_cores"]
    print("| " + " | ".join(cols) + " |")
    for d in out:
        print("| " + " | ".join(str(d[c]) for c in cols) + " |")
    for d in out:
        print(d["arm"], d["sum_s"], d["cpu_s"])


if __name__ == "__main__":
    main()
