#!/usr/bin/env python3
"""Diagnostic (device, under ncu): the kernels PyTorch's SDPA cuDNN backend runs for decode
shapes, to compare their launch shape with weft's. Each shape: bf16 q [B, Hq, 1, 128], K/V
contiguous [B, Hkv, L, 128], enable_gqa; 3 calls after one warm-up. Run as
  ncu --csv --metrics ... python3 scripts/diag/cudnn-ncu.py llama3-8b:1:32768 llama3-8b:32:4096
(the warm-up and the fills are profiled too; the rows to read are the ones after them)."""
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

MODELS = {"llama3-8b": (32, 8), "llama2-7b": (32, 32)}
for spec in sys.argv[1:]:
    model, b, L = spec.split(":")
    hq, hkv = MODELS[model]
    b, L = int(b), int(L)
    q = torch.empty(b, hq, 1, 128, dtype=torch.bfloat16, device="cuda").uniform_(-1, 1)
    k = torch.empty(b, hkv, L, 128, dtype=torch.bfloat16, device="cuda").uniform_(-1, 1)
    v = torch.empty(b, hkv, L, 128, dtype=torch.bfloat16, device="cuda").uniform_(-1, 1)
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_push(spec)
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        for _ in range(4):
            F.scaled_dot_product_attention(q, k, v, enable_gqa=hq != hkv)
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_pop()
    del q, k, v
    torch.cuda.empty_cache()
