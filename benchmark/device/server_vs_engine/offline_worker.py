"""Offline engine held in one process for the interleaved server/engine pairs.

argv: MODEL NUM_PAGES. Builds LLM(model, dummy_weight, num_pages) with the offline bench's other
defaults, the `serving` workload as benchmark/offline/bench.py builds it, and its warm-up generate.
Then reads commands on stdin: `run K` runs the workload with run K's prompts (K=0: the workload's
own ids, the unmeasured run; K>=1: fresh_ids(seed=1+K), exactly bench.py's run K) through
bench.py's own timed_generate and answers one `@@ {json}` line; `quit` shuts the engine down.
"""

import importlib.util
import json
import os
import sys
import time


def say(obj):
    sys.stdout.write("@@ " + json.dumps(obj) + "\n")
    sys.stdout.flush()


def main():
    model, pages = sys.argv[1], int(sys.argv[2])
    spec = importlib.util.spec_from_file_location("offline_bench", os.path.join("benchmark", "offline", "bench.py"))
    ob = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ob)
    from minisgl.benchmark.flags import llm_kwargs
    from minisgl.benchmark.workload import fresh_ids, workload_requests
    from minisgl.llm import LLM

    # bench.py's own flags (--workload serving) and engine keywords, with the KV pages fixed
    sys.argv = ["bench.py", "--model", model, "--dummy-weight", "--workload", "serving"]
    bargs = ob.parse_args()
    kwargs = {**llm_kwargs(bargs), "num_pages": pages}
    t0 = time.perf_counter()
    llm = LLM(model, **kwargs)
    init_s = time.perf_counter() - t0
    eng = llm.scheduler.engine
    vocab = eng.model_config.vocab_size
    prompts, params = workload_requests(bargs, vocab)
    llm.generate(prompts[:2], params[:2], use_tqdm=False)  # bench.py's warm-up
    say({"event": "init", "init_s": init_s, "kwargs": {k: str(v) for k, v in kwargs.items()},
         "num_pages": eng.num_pages, "page_size": eng.page_size,
         "memory": getattr(eng, "memory", None), "timings": getattr(eng, "timings", None),
         "overlap": getattr(llm.scheduler, "overlap", None), "requests": len(prompts),
         "prompt_tokens": sum(len(p) for p in prompts), "max_tokens": sum(p.max_tokens for p in params)})
    for line in sys.stdin:
        cmd = line.split()
        if not cmd:
            continue
        if cmd[0] == "quit":
            break
        k = int(cmd[1])
        run = prompts if k == 0 else fresh_ids(prompts, seed=1 + k, vocab_size=vocab)
        t_start = time.time()
        r = ob.timed_generate(llm, run, params)
        say({"event": "run", "k": k, "t_start": t_start, "t_end": time.time(), **r})
    llm.shutdown()
    say({"event": "bye"})


if __name__ == "__main__":
    main()
