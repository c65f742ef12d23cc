"""Shared fixtures: GPU tests skip (with the reason) where there is no GPU or no PyTorch."""
import pytest

import weft


def _torch_cuda():
    try:
        import torch
    except ImportError:
        return None, "PyTorch is not installed (GPU tests compare against torch)"
    if not torch.cuda.is_available() or not weft.cuda_available():
        return None, "no CUDA GPU visible"
    return torch, None


TORCH, GPU_SKIP_REASON = _torch_cuda()
requires_gpu = pytest.mark.skipif(TORCH is None, reason=str(GPU_SKIP_REASON))
