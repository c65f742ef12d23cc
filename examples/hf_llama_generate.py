#!/usr/bin/env python3
"""A Hugging Face Llama generating through weft: paged KV cache, continuous batching, greedy decode.

A small Llama-architecture model is built from a ``transformers.LlamaConfig`` with random weights
(no hub download). weft is registered as its attention implementation
(``transformers.AttentionInterface.register("weft", ...)``): each attention call appends the step's
new K/V to weft's paged cache (``weft.append_paged_kv``) and runs weft's batch prefill or decode
wrapper on it. The KV cache lives in per-layer page pools handed out by a simple page allocator.

Continuous batching: requests of different prompt lengths arrive at different steps; a step packs
every running request's tokens into one flat sequence (a new request's whole prompt, one token for
each decoding request), planned once per step and run by every layer. Steps where all requests
decode use BatchDecodeWithPagedKVCacheWrapper, steps with a prompt use
BatchPrefillWithPagedKVCacheWrapper (causal, bottom-right aligned). Requests finish at different
steps and give their pages back.

Checks: each request's greedy tokens equal the model's own SDPA path (transformers' "sdpa"
attention with its DynamicCache, one request at a time), for fp16 and bf16; reports the max
logit difference; as the precision's yardstick, whether SDPA pinned to its math backend (a
second correct attention) gives the default SDPA path's tokens, and, teacher-forced on SDPA's
tokens, each path's logit error against the same weights in float32 (a greedy flip at a top-2
margin below SDPA's own error is a near-tie that no implementation in that precision decides);
and the decode step time of weft (4 requests, continuous batching) versus SDPA
(the same 4 requests left-padded in one batch with a DynamicCache) in the same process.

    python examples/hf_llama_generate.py [--out result.json]
"""
from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import sys
import time

import torch
import transformers
from transformers import AttentionInterface, DynamicCache, LlamaConfig, LlamaForCausalLM
from transformers.masking_utils import AttentionMaskInterface

import weft

DEVICE = "cuda"
PAGE_SIZE = 16


class PageAllocator:
    """Free list of page ids of one pool (shared by every layer: page p is slot p of each pool)."""

    def __init__(self, num_pages: int):
        self.free = list(range(num_pages - 1, -1, -1))

    def alloc(self) -> int:
        if not self.free:
            raise RuntimeError("out of KV pages")
        return self.free.pop()

    def release(self, pages):
        self.free.extend(reversed(pages))


class Request:
    def __init__(self, rid: int, prompt: list, max_new: int, arrival: int):
        self.rid, self.prompt, self.max_new, self.arrival = rid, prompt, max_new, arrival
        self.generated: list = []
        self.argmax: list = []  # weft's own greedy choice per step (differs from generated when forced)
        self.logits: list = []
        self.pages: list = []
        self.kv_len = 0  # tokens in the cache

    @property
    def done(self) -> bool:
        return len(self.generated) >= self.max_new


class WeftPagedKV:
    """Per-layer page pools, the page table of the current step, and the planned wrappers."""

    def __init__(self, cfg: LlamaConfig, num_pages: int, dtype: torch.dtype, max_batch: int):
        self.hq, self.hkv = cfg.num_attention_heads, cfg.num_key_value_heads
        self.d = cfg.head_dim
        shape = (num_pages, PAGE_SIZE, self.hkv, self.d)  # NHD
        self.k = [torch.zeros(shape, dtype=dtype, device=DEVICE) for _ in range(cfg.num_hidden_layers)]
        self.v = [torch.zeros(shape, dtype=dtype, device=DEVICE) for _ in range(cfg.num_hidden_layers)]
        self.dtype = dtype
        self.alloc = PageAllocator(num_pages)
        # decode: a caller-provided workspace buffer; prefill: the wrapper allocates its own once.
        ws = torch.empty(64 << 20, dtype=torch.uint8, device=DEVICE)
        self.decode = weft.BatchDecodeWithPagedKVCacheWrapper(ws, "NHD", max_batch_size=max_batch,
                                                              max_num_pages=num_pages)
        self.prefill = weft.BatchPrefillWithPagedKVCacheWrapper(None, "NHD", max_batch_size=max_batch,
                                                                max_total_q=2048, max_num_pages=num_pages)
        self.mode = None
        self.append_args = None

    def begin_step(self, reqs, q_lens):
        """Allocate pages for the step's new tokens, build the page table (host + device copies),
        plan the wrapper the step uses (once; every layer runs it)."""
        indptr, indices, last, bi, pos, qo = [0], [], [], [], [], [0]
        for b, (r, n) in enumerate(zip(reqs, q_lens)):
            new_len = r.kv_len + n
            while len(r.pages) * PAGE_SIZE < new_len:
                r.pages.append(self.alloc.alloc())
            bi += [b] * n
            pos += list(range(r.kv_len, new_len))
            r.kv_len = new_len
            indices += r.pages
            indptr.append(len(indices))
            last.append(new_len - (len(r.pages) - 1) * PAGE_SIZE)
            qo.append(qo[-1] + n)
        host = {k: torch.tensor(v, dtype=torch.int32) for k, v in
                dict(indptr=indptr, indices=indices, last=last, bi=bi, pos=pos, qo=qo).items()}
        dev = {k: v.to(DEVICE) for k, v in host.items()}
        # weft validates every index on the host: give each argument in both copies (no syncs).
        self.append_args = dict(batch_indices=(dev["bi"], host["bi"]), positions=(dev["pos"], host["pos"]),
                                kv_indices=(dev["indices"], host["indices"]),
                                kv_indptr=(dev["indptr"], host["indptr"]),
                                kv_last_page_len=(dev["last"], host["last"]))
        if all(n == 1 for n in q_lens):
            self.mode = "decode"
            self.decode.plan(host["indptr"], host["indices"], host["last"], self.hq, self.hkv, self.d, PAGE_SIZE,
                             q_data_type=self.dtype)
        else:
            self.mode = "prefill"
            self.prefill.plan(host["qo"], host["indptr"], host["indices"], host["last"], self.hq, self.hkv, self.d,
                              PAGE_SIZE, causal=True, q_data_type=self.dtype)
        return qo

    def finish(self, r: Request):
        self.alloc.release(r.pages)
        r.pages = []


CTX: WeftPagedKV | None = None


def weft_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """transformers attention interface: query [1, Hq, T, D], key/value [1, Hkv, T, D] (the step's
    new tokens, RoPE applied); returns ([1, T, Hq, D], None)."""
    kv = CTX
    layer = module.layer_idx
    q = query[0].transpose(0, 1).contiguous()  # [T, Hq, D] (a no-op view in practice)
    k = key[0].transpose(0, 1).contiguous()
    v = value[0].transpose(0, 1).contiguous()
    cache = (kv.k[layer], kv.v[layer])
    weft.append_paged_kv(k, v, paged_kv_cache=cache, **kv.append_args)
    wrapper = kv.decode if kv.mode == "decode" else kv.prefill
    out = wrapper.run(q, cache)
    return out.unsqueeze(0), None


def weft_mask(*args, **kwargs):
    return None  # masks come from the page table and the plan (causal, bottom-right aligned)


AttentionInterface.register("weft", weft_attention)
AttentionMaskInterface.register("weft", weft_mask)


def build_model(dtype):
    cfg = LlamaConfig(vocab_size=1024, hidden_size=1024, intermediate_size=2816, num_hidden_layers=4,
                      num_attention_heads=8, num_key_value_heads=2, head_dim=128, max_position_embeddings=4096,
                      rms_norm_eps=1e-5, tie_word_embeddings=False)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg)
    # A random model behaves like a trained one only if its residual stream is stable: embeddings of
    # unit scale and GPT-2's residual-scaled init of the output projections (std 0.02 / sqrt(2 L)),
    # so that each layer adds a perturbation instead of replacing the stream (with the default init
    # every layer's output dominates and logits are flat: greedy argmax ties at bf16 resolution).
    with torch.no_grad():
        model.model.embed_tokens.weight.normal_(0.0, 1.0)
        for layer in model.model.layers:
            std = 0.02 / math.sqrt(2 * cfg.num_hidden_layers)
            layer.self_attn.o_proj.weight.normal_(0.0, std)
            layer.mlp.down_proj.weight.normal_(0.0, std)
    model = model.to(device=DEVICE, dtype=dtype).eval()
    # Logits in float32 from the final hidden state (both paths): a bf16 lm_head output rounds the
    # top-2 logits of a flat random model to the same value, a tie no attention kernel decides.
    model.lm_head_f32 = model.lm_head.weight.detach().float()
    return cfg, model


def logits_f32(model, hidden):
    return hidden.float() @ model.lm_head_f32.T


def make_requests(seed=1):
    g = torch.Generator().manual_seed(seed)
    spec = [(23, 64, 0), (150, 80, 0), (77, 72, 6), (300, 96, 15)]  # prompt length, new tokens, arrival step
    return [Request(i, torch.randint(0, 1024, (n,), generator=g).tolist(), m, a) for i, (n, m, a) in enumerate(spec)]


@torch.no_grad()
def generate_weft(model, cfg, dtype, forced=None):
    """Continuous batching through weft. Returns the requests and per-step records. ``forced``
    (rid -> tokens): teacher forcing, each request is fed these tokens instead of its own argmax
    (which is still recorded in ``argmax``), so its logits are comparable at every step."""
    global CTX
    model.config._attn_implementation = "weft"
    reqs = make_requests()
    CTX = WeftPagedKV(cfg, num_pages=256, dtype=dtype, max_batch=8)
    pending, running, steps, step = list(reqs), [], [], 0
    while pending or running:
        admitted = [r for r in pending if r.arrival <= step]
        pending = [r for r in pending if r.arrival > step]
        batch = running + admitted
        q_lens = [1] * len(running) + [len(r.prompt) for r in admitted]
        tokens, positions = [], []
        for r, n in zip(batch, q_lens):
            seq = r.prompt if n > 1 else [r.generated[-1]]
            tokens += seq
            positions += list(range(r.kv_len, r.kv_len + n))
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        qo = CTX.begin_step(batch, q_lens)
        ids = torch.tensor([tokens], device=DEVICE)
        pos = torch.tensor([positions], device=DEVICE)
        keep = torch.tensor(qo[1:], device=DEVICE) - 1  # last token of each request
        hidden = model.model(input_ids=ids, position_ids=pos, use_cache=False).last_hidden_state[0]
        logits = logits_f32(model, hidden[keep])
        nxt = logits.argmax(-1).tolist()
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        steps.append(dict(step=step, mode=CTX.mode, batch=len(batch), tokens=len(tokens), seconds=dt))
        for b, r in enumerate(batch):
            r.argmax.append(nxt[b])
            r.generated.append(nxt[b] if forced is None else forced[r.rid][len(r.generated)])
            r.logits.append(logits[b].cpu())
        running = []
        for r in batch:
            if r.done:
                CTX.finish(r)
            else:
                running.append(r)
        step += 1
    model.config._attn_implementation = "sdpa"
    return reqs, steps


@torch.no_grad()
def generate_sdpa_reference(model, reqs, forced=None):
    """The model's own SDPA path, one request at a time with a DynamicCache (``forced``: teacher
    forcing as in generate_weft)."""
    model.config._attn_implementation = "sdpa"
    out, times = [], []
    for r in reqs:
        cache = DynamicCache(config=model.config)
        ids = torch.tensor([r.prompt], device=DEVICE)
        toks, logs = [], []
        for i in range(r.max_new):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            h = model.model(input_ids=ids, past_key_values=cache, use_cache=True).last_hidden_state[0, -1]
            lg = logits_f32(model, h)
            t = int(lg.argmax()) if forced is None else forced[r.rid][i]
            if i >= 8:
                times.append(time.perf_counter() - t0)
            toks.append(t)
            logs.append(lg.cpu())
            ids = torch.tensor([[t]], device=DEVICE)
        out.append((toks, logs))
    return out, times


@torch.no_grad()
def sdpa_batched_decode_time(model, reqs, steps=48):
    """SDPA decode step time for the same 4 requests in one left-padded batch (DynamicCache)."""
    model.config._attn_implementation = "sdpa"
    L = max(len(r.prompt) for r in reqs)
    B = len(reqs)
    ids = torch.zeros(B, L, dtype=torch.long, device=DEVICE)
    mask = torch.zeros(B, L, dtype=torch.long, device=DEVICE)
    for b, r in enumerate(reqs):
        ids[b, L - len(r.prompt):] = torch.tensor(r.prompt, device=DEVICE)
        mask[b, L - len(r.prompt):] = 1
    cache = DynamicCache(config=model.config)
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    h = model.model(input_ids=ids, attention_mask=mask, position_ids=pos, past_key_values=cache,
                    use_cache=True).last_hidden_state
    nxt = logits_f32(model, h[:, -1]).argmax(-1, keepdim=True)
    toks = [[int(t)] for t in nxt[:, 0]]
    times = []
    for _ in range(steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        mask = torch.cat([mask, torch.ones(B, 1, dtype=mask.dtype, device=DEVICE)], dim=1)
        pos = pos[:, -1:] + 1
        h = model.model(input_ids=nxt, attention_mask=mask, position_ids=pos, past_key_values=cache,
                        use_cache=True).last_hidden_state
        nxt = logits_f32(model, h[:, -1]).argmax(-1, keepdim=True)
        for b in range(B):
            toks[b].append(int(nxt[b, 0]))
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return times, toks


def compare(dtype_name):
    dtype = getattr(torch, dtype_name)
    cfg, model = build_model(dtype)
    reqs, steps = generate_weft(model, cfg, dtype)
    ref, ref_times = generate_sdpa_reference(model, reqs)
    # A second correct attention in the same precision: SDPA pinned to its math backend (the
    # default picks a fused flash/efficient kernel). Its free-running tokens against the default
    # path's show how often two correct implementations part at near-tie logits.
    from torch.nn.attention import SDPBackend, sdpa_kernel
    with sdpa_kernel(SDPBackend.MATH):
        ref_math, _ = generate_sdpa_reference(model, reqs)
    math_equal = [rm[0] == rd[0] for rm, rd in zip(ref_math, ref)]
    res = dict(dtype=dtype_name, requests=[])
    all_equal = True
    max_diff = 0.0
    for r, (rt, rl) in zip(reqs, ref):
        n = min(len(rt), len(r.generated))
        first = next((i for i in range(n) if rt[i] != r.generated[i]), None)
        agree = n if first is None else first + 1  # logits comparable up to and at the first mismatch
        diffs = [float((r.logits[i] - rl[i]).abs().max()) for i in range(agree)]
        top2 = torch.topk(rl[first], 2).values if first is not None else None
        item = dict(rid=r.rid, prompt_len=len(r.prompt), arrival_step=r.arrival, new_tokens=len(r.generated),
                    tokens_equal=first is None, first_mismatch=first,
                    sdpa_top2_margin_at_mismatch=None if top2 is None else float(top2[0] - top2[1]),
                    max_logit_diff=max(diffs) if diffs else 0.0,
                    max_abs_logit=float(max(x.abs().max() for x in rl)))
        res["requests"].append(item)
        all_equal &= first is None
        max_diff = max(max_diff, item["max_logit_diff"])
    # Teacher forcing on the SDPA path's tokens: weft and SDPA see the same inputs at every step, so
    # their logits compare at every step (free-running paths diverge after the first near-tie), and
    # both are compared with the same model in float32 (SDPA, the same tokens): the rounding error
    # of each low-precision path against a common more precise one.
    forced = {r.rid: rt for r, (rt, _) in zip(reqs, ref)}
    tf_reqs, _ = generate_weft(model, cfg, dtype, forced=forced)
    tf_flips, tf_steps, tf_diff, err_weft, err_sdpa = [], 0, 0.0, 0.0, 0.0
    # The same (rounded) weights in float32 arithmetic: a fresh model loaded from this one's state
    # (deepcopy cannot copy lm_head_f32, a non-leaf tensor).
    model32 = LlamaForCausalLM(cfg)
    model32.load_state_dict({k: t.float() for k, t in model.state_dict().items()})
    model32 = model32.to(device=DEVICE, dtype=torch.float32).eval()
    model32.config._attn_implementation = "sdpa"
    model32.lm_head_f32 = model.lm_head_f32
    ref32, _ = generate_sdpa_reference(model32, reqs, forced=forced)
    del model32
    for r, (rt, rl), (_, rl32) in zip(tf_reqs, ref, ref32):
        for i in range(len(rt)):
            tf_steps += 1
            tf_diff = max(tf_diff, float((r.logits[i] - rl[i]).abs().max()))
            err_weft = max(err_weft, float((r.logits[i] - rl32[i]).abs().max()))
            err_sdpa = max(err_sdpa, float((rl[i] - rl32[i]).abs().max()))
            if r.argmax[i] != rt[i]:
                top2 = torch.topk(rl[i], 2).values
                tf_flips.append(dict(rid=r.rid, step=i, sdpa_top2_margin=float(top2[0] - top2[1]),
                                     logit_diff_at_step=float((r.logits[i] - rl[i]).abs().max())))
    # SDPA's own error against float32 is the precision's noise floor on the logits: a flip at a
    # top-2 margin below it is a near-tie no correct implementation in this precision decides.
    above_floor = [f for f in tf_flips if f["sdpa_top2_margin"] > err_sdpa]
    res.update(teacher_forced=dict(
        steps=tf_steps, argmax_equal_steps=tf_steps - len(tf_flips), flips=tf_flips,
        flips_above_sdpa_noise_floor=len(above_floor),
        max_logit_diff_weft_vs_sdpa=tf_diff, max_logit_err_weft_vs_fp32=err_weft,
        max_logit_err_sdpa_vs_fp32=err_sdpa))
    times_sdpa, toks_sdpa = sdpa_batched_decode_time(model, reqs)
    full_decode = [s["seconds"] for s in steps if s["mode"] == "decode" and s["batch"] == len(reqs)]
    res.update(tokens_equal=all_equal, max_logit_diff=max_diff,
               sdpa_math_backend_tokens_equal_default=math_equal,
               min_new_tokens=min(len(r.generated) for r in reqs),
               steps=len(steps), prefill_steps=sum(s["mode"] == "prefill" for s in steps),
               weft_decode_step_ms_median=1e3 * statistics.median(full_decode) if full_decode else None,
               weft_decode_steps_timed=len(full_decode),
               sdpa_decode_step_ms_median=1e3 * statistics.median(times_sdpa[8:]),
               sdpa_decode_steps_timed=len(times_sdpa) - 8,
               sdpa_batch1_decode_step_ms_median=1e3 * statistics.median(ref_times),
               sdpa_batched_tokens_equal_reference=[toks_sdpa[b] == ref[b][0][:len(toks_sdpa[b])]
                                                    for b in range(len(reqs))])
    del model
    torch.cuda.empty_cache()
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None, help="write the results as JSON here")
    ap.add_argument("--dtypes", default="float16,bfloat16")
    args = ap.parse_args()
    results = dict(device=torch.cuda.get_device_name(), torch=torch.__version__, transformers=transformers.__version__,
                   weft=weft.__version__, python=platform.python_version(),
                   model="LlamaConfig(vocab 1024, hidden 1024, 4 layers, 8 q heads, 2 kv heads, head_dim 128), "
                         "random weights (seed 0; embeddings std 1, o_proj/down_proj std 0.02/sqrt(8)); logits "
                         "in float32 from the final hidden state",
                   page_size=PAGE_SIZE,
                   timing_note="decode step = plan + full model forward + argmax, 4 requests, cuda-synchronized "
                               "wall time; weft: continuous-batching steps with all 4 requests decoding; SDPA: the "
                               "same 4 requests left-padded in one batch with a DynamicCache (first 8 steps "
                               "dropped); SDPA batch 1: the reference loop, one request at a time (first 8 steps of each dropped)",
                   runs=[])
    for name in args.dtypes.split(","):
        r = compare(name)
        results["runs"].append(r)
        print(f"{name}: tokens equal {r['tokens_equal']} (>= {r['min_new_tokens']} tokens/request, 4 requests), "
              f"max logit diff {r['max_logit_diff']:.4g}, decode step weft {r['weft_decode_step_ms_median']:.3f} ms "
              f"vs SDPA {r['sdpa_decode_step_ms_median']:.3f} ms (4 padded; batch 1: "
              f"{r['sdpa_batch1_decode_step_ms_median']:.3f} ms)", flush=True)
        for q in r["requests"]:
            print("   ", q, flush=True)
        tf = r["teacher_forced"]
        print(f"    SDPA math backend vs SDPA default, free-running tokens equal per request: "
              f"{r['sdpa_math_backend_tokens_equal_default']}", flush=True)
        print(f"    teacher-forced on SDPA's tokens: argmax equal {tf['argmax_equal_steps']}/{tf['steps']} steps "
              f"({tf['flips_above_sdpa_noise_floor']} flips above SDPA's own float32 error), "
              f"max logit diff weft-SDPA {tf['max_logit_diff_weft_vs_sdpa']:.4g}; vs float32: weft "
              f"{tf['max_logit_err_weft_vs_fp32']:.4g}, SDPA {tf['max_logit_err_sdpa_vs_fp32']:.4g}; flips {tf['flips']}",
              flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)
    ok = all(r["tokens_equal"] and r["min_new_tokens"] >= 64 for r in results["runs"])
    print("OK" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
