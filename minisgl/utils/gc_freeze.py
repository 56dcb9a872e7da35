"""Keep start-up's objects out of the garbage collector's full passes.

A full (generation 2) collection walks every tracked object. After start-up a process holds
hundreds of thousands of them (torch, transformers, the tokenizer, the model's modules), and each
full pass stalls the API, scheduler, tokenizer and detokenizer processes for tens of milliseconds or
more (benchmark/NOTES.md): a stall for every request in flight, seen as TTFT and inter-token tails.
Those objects live as long as the process, so they are frozen once, when start-up is done (as
vLLM and SGLang do); later full passes walk only what serving allocates.
"""

from __future__ import annotations

import gc


def freeze_startup_objects() -> None:
    gc.collect()  # what start-up left as garbage goes now, not frozen forever
    gc.freeze()
