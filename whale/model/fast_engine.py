"""A continuous-batching decoder for Llama-family models, with its own small forward pass.

Why not transformers' forward: its per-module overhead is paid 30 times a token, and its cache cannot take
a new row while others decode. Here every live request owns a slot of one KV cache
(`[slots, kv_heads, capacity, head_dim]` per layer). Each `step()` first admits waiting requests
(prefill, reusing cached KV of a prompt head other requests already computed), then decodes one token for
every live row. A finished row frees its slot at once, so the batch stays full while requests keep
coming: the runner submits each harness's model call the moment it is made (continuous batching).

Weights are read from the served model into a private packed copy (LoRA deltas merged in) and re-read
whenever any parameter changed in place (torch's version counters), so a training step is visible to the
next generation without a reload. Token ids, stop conditions and sampling semantics are those of
`HFEngine`; every request samples from its own generator, so its tokens do not depend on its neighbours.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from whale.model.engine import Generation, GenerationRequest, SamplingParams
from whale.model.packed_weights import (
    PackedModel,
    UnsupportedModel,
    WeightWatch,
    base_model,
    pack_weights,
)
from whale.model.sampling import chat_prompt_ids, eos_token_ids, finish_check, sample_next, sampled_logprobs


def _rms(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    x = x.float()
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


@dataclass
class _Row:
    handle: int
    request: GenerationRequest
    prompt: list[int]
    head: int  # length of the prompt's cacheable head (all messages but the last), 0 if none
    gen: torch.Generator
    past: int = 0  # tokens already in this row's cache slot
    completion: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)


class FastEngine:
    """Continuous-batching engine: `submit` requests, call `step` until they come back; or `generate`."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        max_batch: int = 64,
        dtype: torch.dtype = torch.float32,
        weights_version: str = "w0",
        prefix_cache_tokens: int = 32768,
        prefill_tokens: int = 8192,
        kv_cache_gib: float | None = None,
    ):
        self.model = model
        self.tokenizer = tokenizer
        self.max_batch = max_batch
        self.dtype = dtype
        self.weights_version = weights_version
        self.prefix_cache_tokens = prefix_cache_tokens
        self.prefill_tokens = prefill_tokens  # per admission step: bounds prefill memory and latency
        self.kv_cache_gib = kv_cache_gib  # bounds the live rows' KV cache; None: max_batch rows, any length
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self.eos_ids = eos_token_ids(model, tokenizer)
        core = base_model(model)
        self.max_positions = int(getattr(core.config, "max_position_embeddings", 4096))
        self.rotary = getattr(getattr(core, "model", None), "rotary_emb", None)
        if self.rotary is None:
            raise UnsupportedModel(f"{type(core).__name__}: not a Llama-style decoder (no model.rotary_emb)")
        self.tokens_generated = 0
        self.prefill_computed = 0  # prompt tokens run through the model
        self.prefill_reused = 0  # prompt tokens whose KV came from the prefix cache
        self.packed: PackedModel | None = None
        self._signature: tuple | None = None
        self._watch = WeightWatch()
        self._cos = self._sin = torch.empty(0)
        self._k: list[torch.Tensor] = []
        self._v: list[torch.Tensor] = []
        self._prefixes: OrderedDict[tuple[int, ...], tuple[list[torch.Tensor], list[torch.Tensor]]] = (
            OrderedDict()
        )
        self._pending: list[_Row] = []
        self._rows: list[_Row] = []  # live rows; row i owns cache slot i
        self._next_handle = 0
        self._sync_weights()

    # ---- public API ----------------------------------------------------------------------------------

    @property
    def busy(self) -> bool:
        return bool(self._pending or self._rows)

    def submit(self, request: GenerationRequest, seed: int) -> int:
        """Queue one request; `seed` is used when the request has none. Returns its handle."""
        prompt = chat_prompt_ids(self.tokenizer, request.messages)
        head = 0
        if len(request.messages) >= 2 and self.prefix_cache_tokens > 0:
            ids = chat_prompt_ids(self.tokenizer, request.messages[:-1], add_generation_prompt=False)
            if len(ids) >= 16 and len(ids) < len(prompt) and prompt[: len(ids)] == ids:
                head = len(ids)
        handle = self._next_handle
        self._next_handle += 1
        gen = torch.Generator().manual_seed(request.seed if request.seed is not None else seed)
        self._pending.append(_Row(handle, request, prompt, head, gen))
        return handle

    def cancel(self, handles: set[int] | None = None) -> None:
        """Drop queued and live requests (all when `handles` is None); their results never come back."""
        self._pending = [r for r in self._pending if handles is not None and r.handle not in handles]
        for i in reversed(range(len(self._rows))):
            if handles is None or self._rows[i].handle in handles:
                self._remove(i)

    def step(self) -> list[tuple[int, Generation]]:
        """Admit what fits, decode one token for every live row; return the requests that finished."""
        self._sync_weights()
        done: list[tuple[int, Generation]] = []
        decoding = len(self._rows)
        if self._pending and len(self._rows) < self.max_batch:
            done += self._admit()
        if decoding:
            done += self._decode(decoding)
        return done

    def generate(self, requests: list[GenerationRequest], seed: int) -> list[Generation]:
        handles = [self.submit(r, _derived_seed(seed, i)) for i, r in enumerate(requests)]
        results: dict[int, Generation] = {}
        while len(results) < len(handles):
            results.update(self.step())
        return [results[h] for h in handles]

    def prompt_logits(self, messages: list[dict[str, str]]) -> torch.Tensor:
        """Next-token logits (fp32) after a chat prompt, computed in a spare slot of an idle engine."""
        if self.busy:
            raise RuntimeError("prompt_logits needs an idle engine")
        self._sync_weights()
        request = GenerationRequest(messages)
        row = _Row(-1, request, chat_prompt_ids(self.tokenizer, messages), 0, torch.Generator())
        self._rows.append(row)
        try:
            return self._forward(0, [row.prompt])[0]
        finally:
            self._rows.clear()

    # ---- weights -------------------------------------------------------------------------------------

    def _sync_weights(self) -> None:
        signature = self._watch.signature(self.model, self.weights_version)
        if signature == self._signature:
            return
        self.packed = pack_weights(self.model, self.dtype)
        self._signature = signature
        self._prefixes.clear()  # cached KV was computed with the old weights

    # ---- scheduling ----------------------------------------------------------------------------------

    def _admit(self) -> list[tuple[int, Generation]]:
        free = self.max_batch - len(self._rows)
        if not self._rows and self._k and self.kv_cache_gib is not None:
            need = max(self._reach(r) for r in self._pending[:free])
            if self._kv_rows(self._k[0].shape[2]) < self._kv_rows(need):
                self._k, self._v = [], []  # idle, and a cache sized for shorter rows holds more of them
        longest = max([self._k[0].shape[2] if self._k else 0] + [self._reach(r) for r in self._rows])
        take, tokens = [], 0
        for row in self._pending:
            if len(take) == free or (take and tokens + len(row.prompt) > self.prefill_tokens):
                break
            longest = max(longest, self._reach(row))
            if (self._rows or take) and len(self._rows) + len(take) + 1 > self._kv_rows(longest):
                break
            take.append(row)
            tokens += len(row.prompt)
        self._pending = self._pending[len(take) :]
        done, admitted = [], []
        for row in take:
            room = self.max_positions - len(row.prompt)
            if room <= 0:  # nothing can be generated; say so rather than fail the batch
                done.append((row.handle, self._result(row, "length")))
            else:
                admitted.append(row)
        if not admitted:
            return done
        # A prompt admitted more than once (a task's k samples) is computed once: its twins copy the
        # original's KV and logits. Heads not cached yet: computed once, in the slot of the first row with it.
        originals: dict[tuple[int, ...], _Row] = {}
        twins: list[tuple[_Row, _Row]] = []  # (twin, its original)
        for row in admitted:
            original = originals.setdefault(tuple(row.prompt), row)
            if original is not row:
                twins.append((row, original))
        firsts: dict[tuple[int, ...], _Row] = {}
        for row in originals.values():
            key = tuple(row.prompt[: row.head])
            if row.head and key not in self._prefixes and key not in firsts:
                firsts[key] = row
        heads = list(firsts.values())
        uniques = heads + [r for r in originals.values() if r not in heads]
        start = len(self._rows)
        self._rows.extend(uniques + [twin for twin, _ in twins])
        if heads:
            self._forward(start, [r.prompt[: r.head] for r in heads], need_logits=False)
            self.prefill_computed += sum(r.head for r in heads)
            for i, row in enumerate(heads):
                row.past = row.head
                self._remember_prefix(start + i, row)
        for i, row in enumerate(uniques):
            if row.past == 0 and row.head:
                self._restore_prefix(start + i, row)
        self.prefill_computed += sum(len(r.prompt) - r.past for r in uniques)
        logits = self._forward(start, [r.prompt[r.past :] for r in uniques])
        slot_of = {id(r): start + i for i, r in enumerate(uniques)}
        for j, (twin, original) in enumerate(twins):
            self._copy_slot(slot_of[id(original)], start + len(uniques) + j, len(twin.prompt))
            twin.past = len(twin.prompt)
            self.prefill_reused += len(twin.prompt)
        if twins:
            logits = torch.cat([logits, logits[[slot_of[id(o)] - start for _, o in twins]]])
        order = uniques + [twin for twin, _ in twins]
        return done + self._sample(start, order, logits)

    def _reach(self, row: _Row) -> int:
        """The cache positions a row may come to fill: its prompt and every token it may generate."""
        return min(self.max_positions, len(row.prompt) + row.request.params.max_tokens)

    def _kv_rows(self, length: int) -> int:
        """How many rows a KV cache of `length` positions may hold within kv_cache_gib."""
        if self.kv_cache_gib is None or self.packed is None:
            return self.max_batch
        pk = self.packed
        per_position = 2 * len(pk.layers) * pk.kv_heads * pk.head_dim * pk.dtype.itemsize
        size = _cache_positions(max(length, 1))
        return max(1, min(self.max_batch, int(self.kv_cache_gib * 2**30) // (per_position * size)))

    def _decode(self, n: int) -> list[tuple[int, Generation]]:
        rows = self._rows[:n]
        logits = self._forward(0, [[r.completion[-1]] for r in rows])
        return self._sample(0, rows, logits)

    def _sample(self, start: int, rows: list[_Row], logits: torch.Tensor) -> list[tuple[int, Generation]]:
        groups: dict[tuple, list[int]] = {}
        for i, row in enumerate(rows):
            p = row.request.params
            groups.setdefault((p.temperature, p.top_p, p.top_k), []).append(i)
        tokens = torch.empty(len(rows), dtype=torch.long)
        chosen = torch.zeros(len(rows))
        for members in groups.values():
            params = rows[members[0]].request.params
            idx = torch.tensor(members)
            part = logits if len(members) == len(rows) else logits[idx]
            tokens[idx] = sample_next(part, params, rows[members[0]].gen, [rows[i].gen for i in members])
            if any(rows[i].request.logprobs for i in members):
                chosen[idx] = sampled_logprobs(part, tokens[idx], params.temperature)
        finished = []
        for i, row in enumerate(rows):
            tok = int(tokens[i])
            row.completion.append(tok)
            row.logprobs.append(float(chosen[i]))
            self.tokens_generated += 1
            params = row.request.params
            if len(row.prompt) + len(row.completion) >= self.max_positions:
                params = SamplingParams(**{**params.__dict__, "max_tokens": len(row.completion)})
            reason, cut = finish_check(self.tokenizer, self.eos_ids, tok, row.completion, params)
            if reason is not None:
                finished.append((start + i, row, reason, cut))
        done = []
        for slot, row, reason, cut in sorted(finished, key=lambda f: -f[0]):
            self._remove(slot)
            done.append((row.handle, self._result(row, reason, cut)))
        return done

    def _result(self, row: _Row, reason: str, cut: str | None = None) -> Generation:
        text = cut if cut is not None else self.tokenizer.decode(row.completion, skip_special_tokens=True)
        logprobs = row.logprobs if row.request.logprobs else None
        return Generation(text, list(row.prompt), row.completion, reason, logprobs)

    def _remove(self, slot: int) -> None:
        """Free a slot by moving the last live row into it (its cache rows too)."""
        last = len(self._rows) - 1
        if slot != last:
            self._copy_slot(last, slot, self._rows[last].past)
            self._rows[slot] = self._rows[last]
        self._rows.pop()

    def _copy_slot(self, source: int, target: int, length: int) -> None:
        """The first `length` cached positions of slot `source` into slot `target`, in every layer."""
        for cache in (self._k, self._v):
            for layer in cache:
                layer[target, :, :length] = layer[source, :, :length]

    # ---- prefix cache --------------------------------------------------------------------------------

    def _remember_prefix(self, slot: int, row: _Row) -> None:
        key = tuple(row.prompt[: row.head])
        self._prefixes[key] = (
            [layer[slot, :, : row.head].clone() for layer in self._k],
            [layer[slot, :, : row.head].clone() for layer in self._v],
        )
        while sum(len(k) for k in self._prefixes) > self.prefix_cache_tokens and len(self._prefixes) > 1:
            self._prefixes.popitem(last=False)

    def _restore_prefix(self, slot: int, row: _Row) -> None:
        key = tuple(row.prompt[: row.head])
        entry = self._prefixes.get(key)
        if entry is None:
            return
        self._prefixes.move_to_end(key)
        self._ensure_capacity(row.head)
        for cache, saved in zip((self._k, self._v), entry, strict=True):
            for layer, kv in zip(cache, saved, strict=True):
                layer[slot, :, : row.head] = kv
        row.past = row.head
        self.prefill_reused += row.head

    # ---- the model -----------------------------------------------------------------------------------

    def _ensure_capacity(self, length: int) -> None:
        """Grow the KV cache to hold the live rows at `length` positions. Both sides grow on demand: a
        cache sized for max_batch rows is gigabytes of fresh pages, slow to fault in, which few live rows
        (an evaluation, a server) never use."""
        pk = self.packed
        have_rows, have = (self._k[0].shape[0], self._k[0].shape[2]) if self._k else (0, 0)
        rows = len(self._rows)
        if length > have or rows > have_rows:
            size = max(have, _cache_positions(length))
            batch = max(have_rows, min(self.max_batch, 1 << max(rows - 1, 7).bit_length()))
            batch = max(rows, min(batch, self._kv_rows(size)))  # slots past the live rows hold nothing
            keep = min(have_rows, batch)
            shape = (batch, pk.kv_heads, size, pk.head_dim)
            for cache in (self._k, self._v):
                old = list(cache)
                cache.clear()
                for i in range(len(pk.layers)):
                    fresh = torch.zeros(shape, dtype=pk.dtype)
                    if old:
                        fresh[:keep, :, :have] = old[i][:keep]
                        old[i] = torch.empty(0)  # freed now: the old and new caches never coexist whole
                    cache.append(fresh)
        if length > self._cos.shape[0]:
            size = -(-length // 1024) * 1024
            with torch.no_grad():
                cos, sin = self.rotary(torch.zeros(1), torch.arange(size)[None])
            self._cos, self._sin = cos[0].float(), sin[0].float()

    @torch.no_grad()
    def _forward(self, start: int, chunks: list[list[int]], need_logits: bool = True) -> torch.Tensor:
        """Append `chunks[i]` to the row in slot start+i (after its `past` tokens); return each row's
        next-token logits (fp32, [rows, vocab]) at its last new position."""
        pk = self.packed
        rows = self._rows[start : start + len(chunks)]
        m, width = len(chunks), max(len(c) for c in chunks)
        past = torch.tensor([r.past for r in rows])
        lengths = torch.tensor([len(c) for c in chunks])
        total = past + lengths
        self._ensure_capacity(int(total.max()))
        ids = torch.full((m, width), self.pad_id, dtype=torch.long)
        for i, c in enumerate(chunks):
            ids[i, : len(c)] = torch.tensor(c)
        offsets = torch.arange(width)
        pos = past[:, None] + offsets[None]  # [m, width]
        valid = offsets[None] < lengths[:, None]
        span = int(total.max())
        keys = torch.arange(span)
        mask = (keys[None, None] <= pos[:, :, None]) & (keys[None, None] < total[:, None, None])  # [m,w,T]
        write_slot = (start + torch.arange(m))[:, None].expand(m, width)[valid]
        write_pos = pos[valid]
        safe = pos.clamp(max=self._cos.shape[0] - 1)
        cos, sin = self._cos[safe][:, :, None], self._sin[safe][:, :, None]  # [m, w, 1, D]
        heads, kvh, hd = pk.heads, pk.kv_heads, pk.head_dim
        group = heads // kvh
        attn_mask = mask[:, None].repeat(1, 1, group, 1)  # [m, 1, group * w, T]
        x = pk.embed[ids].float()
        for li, layer in enumerate(pk.layers):
            h = _rms(x, layer.ln_in, pk.eps).to(pk.dtype)
            qkv = F.linear(h, layer.qkv, layer.qkv_bias)
            q, k, v = qkv.split([heads * hd, kvh * hd, kvh * hd], dim=-1)
            q, k, v = q.view(m, width, heads, hd), k.view(m, width, kvh, hd), v.view(m, width, kvh, hd)
            if layer.q_norm is not None:
                q, k = _rms(q, layer.q_norm, pk.eps), _rms(k, layer.k_norm, pk.eps)
            q = _rope(q.float(), cos, sin).to(pk.dtype)
            k = _rope(k.float(), cos, sin).to(pk.dtype)
            kc, vc = self._k[li], self._v[li]
            kc[write_slot, :, write_pos] = k[valid]
            vc[write_slot, :, write_pos] = v[valid]
            # grouped-query attention without copying K/V: the `group` query heads that share a kv head
            # become extra query positions of that kv head
            qg = q.view(m, width, kvh, group, hd).permute(0, 2, 3, 1, 4).reshape(m, kvh, group * width, hd)
            out = F.scaled_dot_product_attention(
                qg, kc[start : start + m, :, :span], vc[start : start + m, :, :span],
                attn_mask=attn_mask, scale=pk.scale,
            )  # fmt: skip
            out = out.view(m, kvh, group, width, hd).permute(0, 3, 1, 2, 4).reshape(m, width, heads * hd)
            x = x + F.linear(out, layer.o).float()
            h = _rms(x, layer.ln_post, pk.eps).to(pk.dtype)
            gate, up = F.linear(h, layer.gate_up).chunk(2, dim=-1)
            x = x + F.linear(F.silu(gate) * up, layer.down).float()
        for r, n in zip(rows, lengths.tolist(), strict=True):
            r.past += n
        if not need_logits:
            return torch.empty(0)
        last = x[torch.arange(m), lengths - 1]
        return F.linear(_rms(last, pk.norm, pk.eps).to(pk.dtype), pk.lm_head).float()


def _cache_positions(length: int) -> int:
    """The KV cache's length for rows up to `length` positions: grown in steps of 256, not every token."""
    return -(-length // 256) * 256


def _derived_seed(seed: int, index: int) -> int:
    """A request's own seed when it brings none: a function of the batch seed and its position."""
    digest = hashlib.blake2b(f"{seed}:{index}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") & ((1 << 63) - 1)
