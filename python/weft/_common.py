"""Argument helpers shared by the FlashInfer-style wrappers (dtype and layout codes, streams,
output allocation, fp8 pools)."""
from __future__ import annotations

import math
import sys
from typing import Any, Optional, Sequence, Tuple

from . import _weft
from . import _error


# weft::DType values
_F16, _BF16 = 0, 1
_DTYPES = {
    "float16": _F16, "half": _F16, "f16": _F16, "fp16": _F16,
    "bfloat16": _BF16, "bf16": _BF16,
}
_LAYOUTS = {"NHD": 0, "HND": 1}
_DECODE_BACKENDS = {"auto": 0, "cuda_core": 1, "tensor_core": 2}


def cuda_available() -> bool:
    """Whether the CUDA runtime sees at least one GPU (no torch needed)."""
    return _weft.cuda_device_count() > 0


# ---- argument helpers ------------------------------------------------------------------------

def _framework(x: Any) -> str:
    mod = type(x).__module__ or ""
    return mod.split(".", 1)[0]


def _stream_of(stream: Any, *tensors: Any) -> int:
    """The cudaStream_t to launch on: `stream` if given (int, torch.cuda.Stream, cupy Stream), else
    the current stream of the first torch / CuPy array among `tensors`, else PyTorch's current
    stream if torch has initialized CUDA, else 0 (the legacy default stream)."""
    if stream is not None:
        if isinstance(stream, int):
            return stream
        for attr in ("cuda_stream", "ptr"):  # torch.cuda.Stream / cupy.cuda.Stream
            if hasattr(stream, attr):
                return int(getattr(stream, attr))
        raise _error("stream", f"expected an int cudaStream_t, a torch.cuda.Stream or a cupy Stream, got {type(stream)}")
    for t in tensors:
        fw = _framework(t)
        if fw == "torch":
            if t.is_cuda:
                return sys.modules["torch"].cuda.current_stream(t.device).cuda_stream
        elif fw == "cupy":
            return sys.modules["cupy"].cuda.get_current_stream().ptr
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        return torch.cuda.current_stream().cuda_stream
    return 0


def _dtype_code(d: Any, name: str) -> int:
    key = str(d).replace("torch.", "").replace("<class 'numpy.", "").replace("'>", "")
    if key not in _DTYPES:
        raise _error(name, f"must be float16 or bfloat16, got {d}")
    return _DTYPES[key]


def _dtype_of_tensor(t: Any) -> Optional[int]:
    try:
        return _DTYPES.get(str(t.dtype).replace("torch.", ""))
    except AttributeError:
        return None


def _layout_code(kv_layout: str) -> int:
    if kv_layout not in _LAYOUTS:
        raise _error("kv_layout", f'must be "NHD" or "HND", got {kv_layout!r}')
    return _LAYOUTS[kv_layout]


def _check_no_rope(pos_encoding_mode: str, rope_scale: Any, rope_theta: Any) -> None:
    if pos_encoding_mode != "NONE":
        raise _error("pos_encoding_mode", f'only "NONE" is supported (apply RoPE before weft), got {pos_encoding_mode!r}')
    if rope_scale is not None or rope_theta is not None:
        raise _error("rope_scale", "fused RoPE is not supported (apply RoPE before weft)")


def _kv_pair(paged_kv_cache: Any) -> Tuple[Any, Any]:
    """(k, v) from a (k_cache, v_cache) tuple, or (cache, None) for one [pages, 2, ...] tensor."""
    if isinstance(paged_kv_cache, (tuple, list)):
        if len(paged_kv_cache) != 2:
            raise _error("paged_kv_cache", f"a tuple must be (k_cache, v_cache), got {len(paged_kv_cache)} items")
        return paged_kv_cache[0], paged_kv_cache[1]
    return paged_kv_cache, None


def _empty_like(like: Any, shape: Sequence[int], dtype: str, name: str) -> Any:
    fw = _framework(like)
    if fw == "torch":
        torch = sys.modules["torch"]
        return torch.empty(tuple(shape), dtype=getattr(torch, dtype), device=like.device)
    if fw == "cupy":
        cupy = sys.modules["cupy"]
        return cupy.empty(tuple(shape), dtype=cupy.float32 if dtype == "float32" else like.dtype)
    raise _error(name, f"must be given for {fw or type(like)} inputs (weft allocates outputs only for torch and CuPy)")


def _sm_scale(sm_scale: Optional[float], head_dim: int) -> float:
    return 1.0 / math.sqrt(head_dim) if sm_scale is None else float(sm_scale)


def _soft_cap(logits_soft_cap: Optional[float]) -> float:
    return 0.0 if logits_soft_cap is None else float(logits_soft_cap)


# ---- decode ----------------------------------------------------------------------------------

_FP8 = {"float8_e4m3fn": 1, "e4m3": 1, "float8_e5m2": 2, "e5m2": 2}


def _fp8_code(d: Any) -> int:
    """1 (e4m3), 2 (e5m2) or 0 for a dtype or its name."""
    return _FP8.get(str(d).replace("torch.", ""), 0)


def _scale_array(s: Any, like: Any, name: str) -> Any:
    """A KV scale: a 1-D float32 CUDA tensor as given, or a Python float as a 1-element tensor
    (allocated per call: pass tensors when capturing CUDA graphs)."""
    if s is None or hasattr(s, "shape"):
        return s
    torch = sys.modules.get("torch")
    if torch is None or _framework(like) != "torch":
        raise _error(name, "a float scale needs torch tensors; pass a 1-D float32 CUDA array")
    return torch.full((1,), float(s), dtype=torch.float32, device=like.device)
