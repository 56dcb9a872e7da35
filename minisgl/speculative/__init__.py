"""Speculative decoding: a drafter proposes a few tokens per decoding request, the target model
checks them all in one forward pass (a "verify" batch: the extend path, logits at every position),
and the longest prefix the target agrees with is kept, plus the target's own next token.

- `ngram`: prompt lookup, drafts copied from where the request's last tokens appeared before;
- `eagle3_head`, `eagle3`: an EAGLE-3 draft head (one decoder layer over the target's hidden
  states, from its published checkpoint format) and its drafting, with the head's own KV cache;
- `acceptance`: which drafts are kept, greedy and sampled (the output keeps the target's
  distribution: the rejection-sampling rule);
- `policy`: per-request acceptance, how many tokens each request drafts, and when speculation is off
  (large batches, low acceptance), so that turning it on is never slower.

The scheduler (minisgl/scheduler/speculation.py) asks for drafts, books the pages and reads the
verdicts; docs/serving.md says when to turn it on.
"""

from __future__ import annotations

from .acceptance import accepted_prefix, rejection_sample
from .eagle3 import Eagle3Drafter, head_aux_layers
from .eagle3_head import load_eagle3_head
from .ngram import Drafter, NgramDrafter
from .policy import SpeculationPolicy

__all__ = ["Drafter", "Eagle3Drafter", "NgramDrafter", "SpeculationPolicy", "accepted_prefix", "head_aux_layers",
           "load_eagle3_head", "rejection_sample"]
