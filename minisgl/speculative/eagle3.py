"""EAGLE-3 drafting (`--speculative eagle3 --draft-model PATH`): the draft head (eagle3_head.py)
proposes each request's next k tokens, one head step each, from the target's hidden states.

The head keeps its own KV cache of one layer, in the target's slots: the head's K/V at position i
(from token i + 1 and the target's hidden state at i) lives in the slot the page table gives
position i, so it is allocated, shared through the prefix cache, trimmed and freed with the
target's pages, and nothing else tracks it. After every target forward pass (`after_forward`:
prefill chunks, decode and verify steps) the head runs over the positions the target computed,
reading the next token of each from the token pool, where the target's sampled tokens already are;
that writes its KV for them and leaves, per request, the head's output at its computed positions.
For a verify step the host learns later how many drafts were kept; the row to draft from is the
one at the request's position then (seq_len - 2: the last position whose next token is known).

`propose_batch` then drafts: its first token from that row, each further one by a head step over
the previous token and the head's own previous output, at the positions after. Those steps' K/V
go to a few scratch slots per table row (never the target's pages: the drafts are not verified
yet). Drafts are the head's most likely tokens (q one-hot), for which the engine's verify rule,
keeping drafts while they equal the tokens sampled at each position, is the rejection-sampling
rule exactly (minisgl.speculative.acceptance): sampled and seeded requests draw the very tokens
they draw without speculation.

The head reads the target's hidden states (DecoderModel.aux_hidden), which every forward pass
records, CUDA graphs included, once the engine is told which (EngineConfig.record_hidden_layers,
from the head's config: minisgl.scheduler.speculation.engine_config). Attention over the head's
KV is plain PyTorch (one padded SDPA per group of requests).
A prefix-cache hit reuses the head's KV of the cached positions; its last one was computed with
the token that followed it in the earlier request, which only changes drafts, never outputs.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from minisgl.core.batch import Batch, Req
from minisgl.core.host import logit_rows, ragged_arange, to_device, token_positions
from minisgl.models.decoder import hidden_recorder

from .eagle3_head import Eagle3Config, Eagle3Head

KEY_BUDGET = 1 << 15  # keys gathered per attention group (requests x padded context length)


def aux_layer_ids(head_ids: tuple[int, ...] | None, num_layers: int) -> tuple[int, ...]:
    """The target layers whose incoming residual stream the head reads: EAGLE-3's default (2, the
    middle, the third from last), or the head config's ids (outputs of those layers: the next
    layers' inputs)."""
    ids = (2, num_layers // 2, num_layers - 3) if head_ids is None else tuple(i + 1 for i in head_ids)
    if len(ids) != 3 or not all(0 <= i < num_layers for i in ids):
        source = "EAGLE-3's default" if head_ids is None else "the head's eagle_aux_hidden_state_layer_ids"
        raise ValueError(f"--draft-model: {source} reads the inputs of layers {ids}, which a target of "
                         f"{num_layers} layers does not have")
    return ids


def head_aux_layers(path: str, num_layers: int) -> tuple[int, ...]:
    """The target layers whose hidden states the head at `path` (a local directory) reads."""
    return aux_layer_ids(Eagle3Config.read(path).aux_layer_ids, num_layers)


class Eagle3Drafter:
    def __init__(self, head: Eagle3Head, target_model: nn.Module, page_table: torch.Tensor, token_pool: torch.Tensor,
                 num_slots: int, max_k: int):
        """`target_model`: the target (its DecoderModel records the hidden states and lends its
        embed_tokens); `num_slots`: the target's KV slots (pages x page size)."""
        target = hidden_recorder(target_model)
        want = aux_layer_ids(head.cfg.aux_layer_ids, len(target.layers)) if target is not None else ()
        if target is None or target.aux_layers != want:
            raise ValueError(f"--speculative eagle3: the head reads the hidden states of target layers {want}, the "
                             f"engine records {target.aux_layers if target else 'none'} (its record_hidden_layers)")
        self.head, self.target = head, target
        self.embed: nn.Module = head.embed_tokens or target.embed_tokens
        self.page_table, self.token_pool, self.max_k = page_table, token_pool, max_k
        self.scratch = num_slots  # first scratch slot: max_k per table row after the target's slots
        shape = (num_slots + page_table.shape[0] * max_k, head.kv_heads, head.head_dim)
        dtype = head.fc.weight.dtype
        self.k = torch.zeros(shape, dtype=dtype, device=page_table.device)
        self.v = torch.zeros(shape, dtype=dtype, device=page_table.device)
        # uid -> (head outputs, their draft tokens, first row of the request, its first position, rows)
        self.last: dict[int, tuple[torch.Tensor, torch.Tensor, int, int, int]] = {}

    @property
    def device(self) -> torch.device:
        return self.page_table.device

    @torch.inference_mode()
    def after_forward(self, batch: Batch) -> None:
        """The head over the positions `batch` computed (eager pass: its positions and out_loc set)."""
        rows, cached, lens = batch.host_arrays
        extend = lens - cached
        n = int(extend.sum())
        positions = token_positions(cached, extend)
        width = self.token_pool.shape[1]
        after = np.repeat(rows * width, extend) + np.minimum(positions + 1, width - 1)
        verify = batch.phase == "verify"
        counts = extend if verify else np.ones_like(extend)  # rows a request may draft from next
        kept_rows = logit_rows(extend, counts)
        dev = to_device(np.concatenate([after, kept_rows]), self.device)
        out_loc = batch.out_loc
        assert batch.positions is not None and out_loc is not None and self.target.aux_hidden is not None
        out = self.head.layer(self.embed(self.token_pool.view(-1)[dev[:n]].long()),
                              self.head.fuse(self.target.aux_hidden), batch.positions,
                              lambda q, k, v: self._attend(q, k, v, out_loc, rows, extend, positions, lens))
        kept = out[dev[n:]]
        tokens = self.head.draft_tokens(kept)
        first = 0
        for r, c, e, m in zip(batch.reqs, cached.tolist(), extend.tolist(), counts.tolist()):
            self.last[r.uid] = (kept, tokens, first, c + e - m, m)
            first += m

    def _row(self, r: Req) -> tuple[torch.Tensor, torch.Tensor, int] | None:
        state = self.last.get(r.uid)
        if state is None:
            return None
        kept, tokens, first, start, count = state
        i = r.seq_len - 2 - start
        return (kept, tokens, first + i) if 0 <= i < count else None

    @torch.inference_mode()
    def propose_batch(self, reqs: list[Req], ks: list[int]) -> list[list[int]]:
        """Up to ks[i] drafts for reqs[i] (none for a request the head has no output for)."""
        found = [(i, row) for i, r in enumerate(reqs) if (row := self._row(r)) is not None]
        out: list[list[int]] = [[] for _ in reqs]
        if not found:
            return out
        hidden = torch.stack([kept[j] for _, (kept, _, j) in found])
        token = torch.stack([tokens[j] for _, (_, tokens, j) in found])
        rows = np.array([reqs[i].table_idx for i, _ in found], dtype=np.int64)
        known = np.array([reqs[i].seq_len - 1 for i, _ in found], dtype=np.int64)  # positions with head KV
        drafted = [token]
        for j in range(1, max(ks[i] for i, _ in found)):
            positions = known - 1 + j
            store = to_device(self.scratch + rows * self.max_k + (j - 1), self.device)
            hidden = self.head.layer(self.embed(token), hidden, to_device(positions, self.device),
                                     lambda q, k, v: self._attend(q, k, v, store, rows, np.ones_like(rows), positions,
                                                                  positions + 1, known))
            token = self.head.draft_tokens(hidden)
            drafted.append(token)
        table = torch.stack(drafted, dim=1).tolist()
        for (i, _), tokens in zip(found, table):
            out[i] = tokens[: ks[i]]
        return out

    def _attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, store_at: torch.Tensor, rows: np.ndarray,
                counts: np.ndarray, positions: np.ndarray, lens: np.ndarray,
                committed: np.ndarray | None = None) -> torch.Tensor:
        """Store k/v at `store_at`, then attend: request b's `counts[b]` queries (at `positions`, in
        order) see its keys at positions 0..lens[b]-1, causally. Its keys below `committed[b]` (all,
        when None) are in the page table's slots, the rest in its scratch slots."""
        self.k[store_at], self.v[store_at] = k, v
        out = torch.empty_like(q)
        starts = np.cumsum(counts) - counts
        for group in _groups(lens, KEY_BUDGET):
            b, t_max, s = len(group), int(counts[group].max()), int(lens[group].max())
            # Queries padded to t_max per request (padding at position 0: it sees key 0 and is dropped).
            t = ragged_arange(counts[group])
            flat = np.repeat(np.arange(b) * t_max, counts[group]) + t
            src = np.repeat(starts[group], counts[group]) + t
            q_pos = np.zeros(b * t_max, dtype=np.int64)
            q_pos[flat] = positions[src]
            dev = to_device(np.concatenate([flat, src, q_pos, rows[group],
                                            committed[group] if committed is not None else lens[group]]), self.device)
            d_flat, d_src, d_pos = dev[: len(flat)], dev[len(flat) : 2 * len(flat)], dev[2 * len(flat) : -2 * b]
            d_rows, d_committed = dev[-2 * b : -b], dev[-b:]
            key = torch.arange(s, device=self.device)
            paged = self.page_table[d_rows, :s].long()
            scratch = self.scratch + d_rows[:, None] * self.max_k + (key[None] - d_committed[:, None]).clamp(0, self.max_k - 1)
            slots = torch.where(key[None] < d_committed[:, None], paged, scratch)
            qs = q.new_zeros(b * t_max, *q.shape[1:])
            qs[d_flat] = q[d_src]
            mask = key[None, None, None, :] <= d_pos.view(b, 1, t_max, 1)
            o = F.scaled_dot_product_attention(qs.view(b, t_max, *q.shape[1:]).transpose(1, 2),
                                               self.k[slots].transpose(1, 2), self.v[slots].transpose(1, 2),
                                               attn_mask=mask, enable_gqa=True)
            out[d_src] = o.transpose(1, 2).reshape(b * t_max, *q.shape[1:])[d_flat]
        return out

    def forget(self, uid: int) -> None:
        self.last.pop(uid, None)


def _groups(lens: np.ndarray, budget: int) -> list[np.ndarray]:
    """Consecutive requests in groups of at most `budget` padded keys (one request may pass it)."""
    groups, start, longest = [], 0, 0
    for i, n in enumerate(lens.tolist()):
        if i > start and (i - start + 1) * max(longest, n) > budget:
            groups.append(np.arange(start, i))
            start, longest = i, 0
        longest = max(longest, n)
    groups.append(np.arange(start, len(lens)))
    return groups
