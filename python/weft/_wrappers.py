"""FlashInfer-style wrappers over weft's plan/run C++ API (see the package docstring)."""
from __future__ import annotations

import math
import sys
from typing import Any, Optional, Sequence, Tuple, Union

from . import _weft
from . import WeftError, _error

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


def _decode_run(impl: Any, q: Any, paged_kv_cache: Any, out: Any, lse: Any, return_lse: bool, stream: Any,
                k_scale: Any = None, v_scale: Any = None) -> Any:
    """run() of both decode wrappers: ``out`` (and ``lse``) allocated like ``q`` when not given;
    fp8 pools (torch float8 tensors) cross as their uint8 bytes with their format's code."""
    k, v = _kv_pair(paged_kv_cache)
    if out is None:
        out = _empty_like(q, q.shape, str(q.dtype).replace("torch.", ""), "out")
    if return_lse and lse is None:
        lse = _empty_like(q, (q.shape[0], q.shape[1]), "float32", "lse")
    fp8 = _fp8_code(k.dtype)
    if fp8:
        u8 = sys.modules["torch"].uint8
        k = k.view(u8)
        v = None if v is None else v.view(u8)
        impl.run(q, k, v, out, lse, _stream_of(stream, q), fp8, _scale_array(k_scale, q, "k_scale"),
                 _scale_array(v_scale, q, "v_scale"))
    elif k_scale is not None or v_scale is not None:
        impl.run(q, k, v, out, lse, _stream_of(stream, q), 0, _scale_array(k_scale, q, "k_scale"),
                 _scale_array(v_scale, q, "v_scale"))
    else:
        impl.run(q, k, v, out, lse, _stream_of(stream, q))
    return (out, lse) if return_lse else out


class BatchDecodeWithPagedKVCacheWrapper:
    """Batch decode (one query token per request) on a paged KV cache.

    Mirrors ``flashinfer.BatchDecodeWithPagedKVCacheWrapper``::

        w = weft.BatchDecodeWithPagedKVCacheWrapper(workspace, "NHD")   # workspace may be None
        w.plan(kv_indptr, kv_indices, kv_last_page_len, num_qo_heads, num_kv_heads, head_dim,
               page_size, q_data_type=torch.bfloat16)                   # once per step
        out = w.run(q, (k_cache, v_cache))                              # once per layer

    Shapes: q / out ``[batch, num_qo_heads, head_dim]``; the cache is ``(k_cache, v_cache)`` each
    ``[num_pages, page_size, num_kv_heads, head_dim]`` (NHD) or ``[num_pages, num_kv_heads,
    page_size, head_dim]`` (HND), or one ``[num_pages, 2, ...]`` tensor. float16 / bfloat16;
    head_dim 64, 128 or 256; num_qo_heads a multiple of num_kv_heads.

    Workspace: ``float_workspace_buffer`` (a CUDA uint8 tensor, 256-byte aligned) is used as the
    device workspace if given (plan() raises WeftError naming ``workspace_buffer`` when it is too
    small); otherwise the wrapper allocates one (cudaMalloc) at the first plan(). It is reallocated
    only when a plan needs more than ``max_batch_size`` requests / ``max_num_pages`` pages or other
    head counts: size them up front when you capture CUDA graphs.

    Prefix sharing (``share_prefixes=True``, weft::DecodeOptions::share_prefixes): requests whose
    page lists start with the same full pages read them once; plan() finds them, or
    ``plan_cascade()`` takes them stated level by level (FlashInfer's multi-level cascade).

    CUDA graphs: run() allocates nothing (when ``out`` is given) and never syncs the host; the
    page table lives in wrapper-owned device buffers at fixed addresses, so a graph captured
    around run() replays correctly after a later plan() with other lengths (same q/out/cache
    tensors, batch <= max_batch_size, pages <= max_num_pages, same dtype/layout/heads).
    """

    def __init__(self, float_workspace_buffer: Any = None, kv_layout: str = "NHD",
                 use_cuda_graph: bool = False, *, max_batch_size: int = 0, max_num_pages: int = 0,
                 backend: str = "auto", share_prefixes: bool = False):
        self._layout = _layout_code(kv_layout)
        if backend not in _DECODE_BACKENDS:
            raise _error("backend", f"must be one of {sorted(_DECODE_BACKENDS)}, got {backend!r}")
        self._impl = _weft.Decode(int(max_batch_size), int(max_num_pages), _DECODE_BACKENDS[backend],
                                  bool(share_prefixes), float_workspace_buffer)
        self._num_qo_heads = 0
        self._head_dim = 0
        self._batch = 0
        self._dtype = None

    def plan(self, indptr: Any, indices: Any, last_page_len: Any, num_qo_heads: int, num_kv_heads: int,
             head_dim: int, page_size: int, pos_encoding_mode: str = "NONE", window_left: int = -1,
             logits_soft_cap: Optional[float] = None, q_data_type: Any = "float16", kv_data_type: Any = None,
             data_type: Any = None, sm_scale: Optional[float] = None, rope_scale: Optional[float] = None,
             rope_theta: Optional[float] = None, non_blocking: bool = True, *, stream: Any = None) -> None:
        """Plan one generation step (host work; copies the plan and the page table to the device).

        ``indptr`` [batch + 1], ``indices`` [nnz_pages], ``last_page_len`` [batch]: int32 arrays on the
        host (NumPy, CPU torch) or on the device. Device arrays are copied to the host once here
        (a stream sync); host arrays avoid it. The wrapper keeps its own copies: the caller may
        reuse the arrays right after plan(). ``window_left`` (sliding window, -1 off),
        ``logits_soft_cap`` (None/0 off) and ``sm_scale`` (default 1/sqrt(head_dim)) follow
        FlashInfer's meaning. ``pos_encoding_mode`` must be "NONE" (apply RoPE before weft).
        """
        _check_no_rope(pos_encoding_mode, rope_scale, rope_theta)
        dt = _dtype_code(data_type if data_type is not None else q_data_type, "q_data_type")
        if (kv_data_type is not None and not _fp8_code(kv_data_type)
                and _dtype_code(kv_data_type, "kv_data_type") != dt):
            raise _error("kv_data_type", "must equal q_data_type or be an fp8 format (float8_e4m3fn, float8_e5m2)")
        s = _stream_of(stream, indptr, indices, last_page_len)
        self._impl.plan(indptr, indices, last_page_len, int(num_qo_heads), int(num_kv_heads), int(head_dim),
                        int(page_size), dt, self._layout, _sm_scale(sm_scale, head_dim), int(window_left),
                        _soft_cap(logits_soft_cap), False, s)
        self._num_qo_heads, self._head_dim, self._dtype = int(num_qo_heads), int(head_dim), dt
        self._batch = len(indptr) - 1

    def plan_cascade(self, indptr: Any, indices: Any, last_page_len: Any, levels: Sequence[Tuple[Sequence[int],
                     Sequence[int]]], num_qo_heads: int, num_kv_heads: int, head_dim: int, page_size: int,
                     q_data_type: Any = "float16", sm_scale: Optional[float] = None, *, stream: Any = None) -> None:
        """Plan with explicitly stated shared pages (the wrapper needs ``share_prefixes=True``).

        ``levels``: one ``(req_indptr, num_pages)`` per level, outermost first. A level splits the
        batch into consecutive groups (``req_indptr``: groups + 1 entries from 0 to batch); group g
        shares ``num_pages[g]`` pages, the next pages of each member's page list after the pages of
        the levels above. Levels nest, the stated pages are full pages with the same ids in every
        member's list (weft::CascadeLevel; WeftError naming ``levels`` otherwise).
        """
        dt = _dtype_code(q_data_type, "q_data_type")
        ri = [[int(x) for x in r] for r, _ in levels]
        npg = [[int(x) for x in n] for _, n in levels]
        s = _stream_of(stream, indptr, indices, last_page_len)
        self._impl.plan(indptr, indices, last_page_len, int(num_qo_heads), int(num_kv_heads), int(head_dim),
                        int(page_size), dt, self._layout, _sm_scale(sm_scale, head_dim), -1, 0.0, False, s, ri, npg)
        self._num_qo_heads, self._head_dim, self._dtype = int(num_qo_heads), int(head_dim), dt
        self._batch = len(indptr) - 1

    def run(self, q: Any, paged_kv_cache: Any, *, out: Any = None, lse: Any = None, return_lse: bool = False,
            k_scale: Any = None, v_scale: Any = None, stream: Any = None) -> Any:
        """Decode attention for the planned batch. Returns ``out`` (allocated like ``q`` when not
        given, torch / CuPy only), or ``(out, lse)`` with ``return_lse`` (lse [batch, num_qo_heads]
        float32, natural log).

        fp8 KV pools (``torch.float8_e4m3fn`` / ``torch.float8_e5m2`` caches, x = scale * x8; today
        bf16 q at head_dim 128, no window / ALiBi): ``k_scale`` / ``v_scale`` are their
        dequantization scales, a 1-D float32 CUDA tensor of num_kv_heads (per head) or 1 entries,
        or a Python float (one for the pool; allocated per call, so pass tensors under CUDA graphs).
        """
        return _decode_run(self._impl, q, paged_kv_cache, out, lse, return_lse, stream, k_scale, v_scale)

    def plan_info(self) -> dict:
        """What the last plan decided (grid, items, splits, kernel path)."""
        return self._impl.plan_info()

    @property
    def workspace_bytes(self) -> int:
        return self._impl.workspace_bytes

    forward = run


_DECODE_ROUTES = {"balanced": 0, "work_queue": 1, "no_split": 2, "auto": 3}


def _flat_block_table(block_tables: Any) -> Tuple[Any, int]:
    """[batch, max_blocks] int32 (torch, CuPy, NumPy) -> (contiguous 1-D view, row stride)."""
    shape = tuple(block_tables.shape)
    if len(shape) != 2:
        raise _error("block_tables", f"must be 2-D [batch, max_blocks], got shape {shape}")
    if hasattr(block_tables, "contiguous"):
        block_tables = block_tables.contiguous()
    return block_tables.reshape(-1), int(shape[1])


class BatchDecodeWithBlockTableWrapper:
    """Batch decode over a native vLLM-style block table, with a choice of schedule (route).

    ::

        w = weft.BatchDecodeWithBlockTableWrapper(route="auto", router_table="data/router/h100.json")
        w.plan(block_tables, seq_lens, num_qo_heads, num_kv_heads, head_dim, page_size,
               q_data_type=torch.bfloat16)          # once per step
        out = w.run(q, (k_cache, v_cache))          # once per layer

    ``block_tables`` [batch, max_blocks] int32: row b lists request b's page ids (entries past
    ceil(seq_lens[b] / page_size) are never read); ``seq_lens`` [batch] int32 KV lengths. Host or
    device arrays (device arrays cost one copy to the host in plan()). The cache, q and out are as
    in :class:`BatchDecodeWithPagedKVCacheWrapper`.

    ``route`` (weft::DecodeRoute): ``"balanced"`` (the balanced split-KV plan, CUDA-graph
    replayable), ``"work_queue"`` (one task per non-empty (row, KV head, split) of
    ``work_queue_chunk`` keys on a 1-D grid, a multiple of 16, 0: 2048), ``"no_split"``, or
    ``"auto"``: per plan() the route with the lowest predicted step time under a calibrated router
    table (``router_table``: a path to, or the text of, a table written by ``weft-serve-sim
    --calibrate``, e.g. the repository's ``data/router/h100.json``, for the same head counts and
    head_dim). Work-queue plans are not graph-replayable (their grid follows the plan).
    ``share_prefixes`` (``"balanced"`` or ``"auto"``): requests whose block-table rows start with
    the same page ids read those pages once (prefix-sharing packs; under ``"auto"`` the
    prefix-sharing plan replaces the balanced one as a candidate, taken where rows share pages).
    ``max_tasks`` bounds the work queue's tasks (0: 8 per request and KV head + 1024);
    ``plan_info()["route"]`` says what the last plan() chose.
    """

    def __init__(self, float_workspace_buffer: Any = None, kv_layout: str = "NHD", *, route: str = "balanced",
                 work_queue_chunk: int = 0, max_tasks: int = 0, router_table: Optional[str] = None,
                 share_prefixes: bool = False, max_batch_size: int = 0):
        self._layout = _layout_code(kv_layout)
        if route not in _DECODE_ROUTES:
            raise _error("route", f"must be one of {sorted(_DECODE_ROUTES)}, got {route!r}")
        text = ""
        if router_table is not None:
            text = str(router_table)
            if not text.lstrip().startswith("{"):
                try:
                    with open(text) as f:
                        text = f.read()
                except OSError as e:
                    raise _error("router_table", f"cannot read {router_table!r}: {e}") from None
        self._impl = _weft.DecodeBlocks(int(max_batch_size), _DECODE_ROUTES[route], int(work_queue_chunk),
                                        int(max_tasks), text, bool(share_prefixes), float_workspace_buffer)

    def plan(self, block_tables: Any, seq_lens: Any, num_qo_heads: int, num_kv_heads: int, head_dim: int,
             page_size: int, window_left: int = -1, logits_soft_cap: Optional[float] = None,
             q_data_type: Any = "float16", sm_scale: Optional[float] = None, *, stream: Any = None) -> None:
        """Plan one generation step from the block table (the wrapper keeps its own copies)."""
        flat, stride = _flat_block_table(block_tables)
        dt = _dtype_code(q_data_type, "q_data_type")
        s = _stream_of(stream, block_tables, seq_lens)
        self._impl.plan(flat, stride, seq_lens, int(num_qo_heads), int(num_kv_heads), int(head_dim), int(page_size),
                        dt, self._layout, _sm_scale(sm_scale, head_dim), int(window_left),
                        _soft_cap(logits_soft_cap), False, s)

    def run(self, q: Any, paged_kv_cache: Any, *, out: Any = None, lse: Any = None, return_lse: bool = False,
            stream: Any = None) -> Any:
        """Decode attention for the planned batch (as BatchDecodeWithPagedKVCacheWrapper.run)."""
        return _decode_run(self._impl, q, paged_kv_cache, out, lse, return_lse, stream)

    def plan_info(self) -> dict:
        """What the last plan decided: route ("balanced", "work_queue", "no_split"), route_chunk,
        grid, items, splits."""
        return self._impl.plan_info()

    @property
    def workspace_bytes(self) -> int:
        return self._impl.workspace_bytes

    forward = run


# ---- prefill ---------------------------------------------------------------------------------

class _PrefillBase:
    _paged = True

    def __init__(self, float_workspace_buffer: Any = None, kv_layout: str = "NHD", use_cuda_graph: bool = False,
                 *, max_batch_size: int = 0, max_total_q: int = 0, max_num_pages: int = 0, cta_q: int = 0):
        self._layout = _layout_code(kv_layout)
        if use_cuda_graph and cta_q == 0:
            cta_q = 64  # a fixed tile configuration keeps captured graphs valid across plans
        if cta_q not in (0, 16, 64, 128):
            raise _error("cta_q", f"must be 0 (heuristic), 16, 64 or 128, got {cta_q}")
        self._impl = _weft.Prefill(self._paged, int(max_batch_size), int(max_total_q), int(max_num_pages),
                                   int(cta_q), float_workspace_buffer)

    def plan_info(self) -> dict:
        """What the last plan decided (tile sizes, grid, items, splits, "sm90": the Hopper mainloop ran)."""
        return self._impl.plan_info()

    @property
    def workspace_bytes(self) -> int:
        return self._impl.workspace_bytes

    @staticmethod
    def _common(custom_mask, packed_custom_mask, pos_encoding_mode, rope_scale, rope_theta, q_data_type,
                kv_data_type, head_dim_qk, head_dim_vo):
        if custom_mask is not None or packed_custom_mask is not None:
            raise _error("custom_mask", "custom masks are not wrapped yet (weft's C++ API has them)")
        _check_no_rope(pos_encoding_mode, rope_scale, rope_theta)
        if head_dim_vo is not None and head_dim_vo != head_dim_qk:
            raise _error("head_dim_vo", "must equal head_dim_qk")
        dt = _dtype_code(q_data_type, "q_data_type")
        if kv_data_type is not None and _dtype_code(kv_data_type, "kv_data_type") != dt:
            raise _error("kv_data_type", "must equal q_data_type")
        return dt

    def _out(self, q, out, lse, return_lse):
        if out is None:
            out = _empty_like(q, q.shape, str(q.dtype).replace("torch.", ""), "out")
        if return_lse and lse is None:
            lse = _empty_like(q, (q.shape[0], q.shape[1]), "float32", "lse")
        return out, lse


class BatchPrefillWithPagedKVCacheWrapper(_PrefillBase):
    """Batch prefill / append attention: ragged queries against a paged KV cache.

    Mirrors ``flashinfer.BatchPrefillWithPagedKVCacheWrapper``::

        w = weft.BatchPrefillWithPagedKVCacheWrapper(workspace, "NHD")
        w.plan(qo_indptr, kv_indptr, kv_indices, kv_last_page_len, num_qo_heads, num_kv_heads,
               head_dim, page_size, causal=True, q_data_type=torch.float16)
        out = w.run(q, (k_cache, v_cache))

    q / out ``[total_q, num_qo_heads, head_dim]`` (requests delimited by ``qo_indptr``). Causal
    masks are aligned to the bottom-right (query i of a request with q_len queries and kv_len keys
    sits at position kv_len - q_len + i), as in FlashInfer. Workspace and CUDA graphs as in
    :class:`BatchDecodeWithPagedKVCacheWrapper`; in addition the tile configuration must not change
    between capture and replay: ``use_cuda_graph=True`` (or ``cta_q=``) fixes it.
    ``max_total_q`` bounds the query tokens of a plan (workspace sizing).
    """

    _paged = True

    def plan(self, qo_indptr: Any, paged_kv_indptr: Any, paged_kv_indices: Any, paged_kv_last_page_len: Any,
             num_qo_heads: int, num_kv_heads: int, head_dim_qk: int, page_size: int,
             head_dim_vo: Optional[int] = None, custom_mask: Any = None, packed_custom_mask: Any = None,
             causal: bool = False, pos_encoding_mode: str = "NONE", use_fp16_qk_reduction: bool = False,
             sm_scale: Optional[float] = None, window_left: int = -1, logits_soft_cap: Optional[float] = None,
             rope_scale: Optional[float] = None, rope_theta: Optional[float] = None,
             q_data_type: Any = "float16", kv_data_type: Any = None, non_blocking: bool = True, *,
             stream: Any = None) -> None:
        """Plan one step. Index arrays are int32, host or device; device ones are copied to the host
        once here (a stream sync). The wrapper keeps its own copies."""
        dt = self._common(custom_mask, packed_custom_mask, pos_encoding_mode, rope_scale, rope_theta, q_data_type,
                          kv_data_type, head_dim_qk, head_dim_vo)
        s = _stream_of(stream, qo_indptr, paged_kv_indptr)
        self._impl.plan(qo_indptr, paged_kv_indptr, paged_kv_indices, paged_kv_last_page_len, int(num_qo_heads),
                        int(num_kv_heads), int(head_dim_qk), int(page_size), dt, self._layout,
                        _sm_scale(sm_scale, head_dim_qk), bool(causal), int(window_left), _soft_cap(logits_soft_cap),
                        False, s)

    def run(self, q: Any, paged_kv_cache: Any, *, out: Any = None, lse: Any = None, return_lse: bool = False,
            stream: Any = None) -> Any:
        """Attention of the planned batch; returns ``out`` or ``(out, lse)``."""
        k, v = _kv_pair(paged_kv_cache)
        out, lse = self._out(q, out, lse, return_lse)
        self._impl.run_paged(q, k, v, out, lse, _stream_of(stream, q))
        return (out, lse) if return_lse else out

    forward = run


class BatchPrefillWithRaggedKVCacheWrapper(_PrefillBase):
    """Batch prefill with ragged (contiguous) K/V: request b's keys are rows
    ``kv_indptr[b]:kv_indptr[b+1]`` of k / v ``[total_kv, num_kv_heads, head_dim]``.

    Mirrors ``flashinfer.BatchPrefillWithRaggedKVCacheWrapper``; see
    :class:`BatchPrefillWithPagedKVCacheWrapper` for masks, workspace and graphs. The wrapper
    keeps a device copy of ``kv_indptr`` at a fixed address (run() reads it there).
    """

    _paged = False

    def plan(self, qo_indptr: Any, kv_indptr: Any, num_qo_heads: int, num_kv_heads: int, head_dim_qk: int,
             head_dim_vo: Optional[int] = None, custom_mask: Any = None, packed_custom_mask: Any = None,
             causal: bool = False, pos_encoding_mode: str = "NONE", use_fp16_qk_reduction: bool = False,
             window_left: int = -1, logits_soft_cap: Optional[float] = None, sm_scale: Optional[float] = None,
             rope_scale: Optional[float] = None, rope_theta: Optional[float] = None,
             q_data_type: Any = "float16", kv_data_type: Any = None, non_blocking: bool = True, *,
             stream: Any = None) -> None:
        """Plan one step (``qo_indptr``, ``kv_indptr``: int32 [batch + 1], host or device; device
        ones are copied to the host once here, a stream sync)."""
        dt = self._common(custom_mask, packed_custom_mask, pos_encoding_mode, rope_scale, rope_theta, q_data_type,
                          kv_data_type, head_dim_qk, head_dim_vo)
        s = _stream_of(stream, qo_indptr, kv_indptr)
        self._impl.plan(qo_indptr, kv_indptr, None, None, int(num_qo_heads), int(num_kv_heads), int(head_dim_qk), 1,
                        dt, 0, _sm_scale(sm_scale, head_dim_qk), bool(causal), int(window_left),
                        _soft_cap(logits_soft_cap), False, s)

    def run(self, q: Any, k: Any, v: Any, *, out: Any = None, lse: Any = None, return_lse: bool = False,
            stream: Any = None) -> Any:
        """Attention of the planned batch; returns ``out`` or ``(out, lse)``."""
        out, lse = self._out(q, out, lse, return_lse)
        self._impl.run_ragged(q, k, v, out, lse, _stream_of(stream, q))
        return (out, lse) if return_lse else out

    forward = run



_POD_MODES = {"auto": 0, "fused": 1, "serial": 2, "partition": 3}


class PODWithPagedKVCacheWrapper:
    """Hybrid batches (POD-Attention): one step's prefill chunks and decodes on the same paged KV
    cache in one fused launch whose CTAs bind to prefill or decode work per SM, or -- where the
    planner predicts the fused kernel is not faster (``mode="auto"``) -- the prefill and decode
    kernels back to back. weft's ``BatchPODAttention``::

        w = weft.PODWithPagedKVCacheWrapper(workspace, "NHD")
        w.plan(qo_indptr_p, kv_indptr_p, kv_indices_p, last_page_len_p,
               kv_indptr_d, kv_indices_d, last_page_len_d,
               num_qo_heads, num_kv_heads, head_dim, page_size, causal=True, q_data_type=torch.bfloat16)
        out_p, out_d = w.run(q_p, q_d, (k_cache, v_cache))

    Unlike FlashInfer's POD wrapper, whose prefill side reads ragged K/V, both sides read the paged
    cache: a prefill request with q_len queries and kv_len keys is the chunk of the last q_len
    positions of its sequence (chunked prefill; ``causal`` masks it bottom-right). q_p / out_p
    ``[total_q, num_qo_heads, head_dim]``, q_d / out_d ``[decode_batch, num_qo_heads, head_dim]``;
    head_dim 64 or 128. ``mode`` ("auto", "fused", "serial", "partition": the SM partition of
    ``weft::PodMode::kPartition``) pins the launch for CUDA graphs (a re-plan that switches
    between them changes the launches). ``plan_info()`` says
    which ran and the predicted times.
    """

    def __init__(self, float_workspace_buffer: Any = None, kv_layout: str = "NHD", *, mode: str = "auto",
                 max_prefill_batch: int = 0, max_prefill_tokens: int = 0, max_decode_batch: int = 0,
                 max_num_pages: int = 0):
        self._layout = _layout_code(kv_layout)
        if mode not in _POD_MODES:
            raise _error("mode", f'must be "auto", "fused", "serial" or "partition", got {mode!r}')
        self._impl = _weft.Pod(int(max_prefill_batch), int(max_prefill_tokens), int(max_decode_batch),
                               int(max_num_pages), _POD_MODES[mode], float_workspace_buffer)
        self._return_lse = False

    def plan(self, qo_indptr_p: Any, kv_indptr_p: Any, kv_indices_p: Any, last_page_len_p: Any,
             kv_indptr_d: Any, kv_indices_d: Any, last_page_len_d: Any, num_qo_heads: int, num_kv_heads: int,
             head_dim: int, page_size: int, causal: bool = True, sm_scale: Optional[float] = None,
             window_left: int = -1, logits_soft_cap: Optional[float] = None, q_data_type: Any = "float16",
             kv_data_type: Any = None, *, stream: Any = None) -> None:
        """Plan one step. Index arrays are int32, host or device (device ones are copied to the host
        once here: a stream sync). The wrapper keeps its own copies."""
        dt = _dtype_code(q_data_type, "q_data_type")
        if kv_data_type is not None and _dtype_code(kv_data_type, "kv_data_type") != dt:
            raise _error("kv_data_type", "must equal q_data_type")
        s = _stream_of(stream, qo_indptr_p, kv_indptr_p, kv_indptr_d)
        self._impl.plan(qo_indptr_p, kv_indptr_p, kv_indices_p, last_page_len_p, kv_indptr_d, kv_indices_d,
                        last_page_len_d, int(num_qo_heads), int(num_kv_heads), int(head_dim), int(page_size), dt,
                        self._layout, _sm_scale(sm_scale, head_dim), bool(causal), int(window_left),
                        _soft_cap(logits_soft_cap), False, s)

    def run(self, q_p: Any, q_d: Any, paged_kv_cache: Any, *, out_p: Any = None, out_d: Any = None,
            lse_p: Any = None, lse_d: Any = None, return_lse: bool = False, stream: Any = None) -> Any:
        """Attention of the planned step; returns ``(out_p, out_d)`` or, with ``return_lse``,
        ``(out_p, out_d, lse_p, lse_d)`` (natural-log LSE, float32)."""
        k, v = _kv_pair(paged_kv_cache)
        if out_p is None:
            out_p = _empty_like(q_p, q_p.shape, str(q_p.dtype).replace("torch.", ""), "out_p")
        if out_d is None:
            out_d = _empty_like(q_d, q_d.shape, str(q_d.dtype).replace("torch.", ""), "out_d")
        if return_lse:
            if lse_p is None:
                lse_p = _empty_like(q_p, (q_p.shape[0], q_p.shape[1]), "float32", "lse_p")
            if lse_d is None:
                lse_d = _empty_like(q_d, (q_d.shape[0], q_d.shape[1]), "float32", "lse_d")
        self._impl.run(q_p, q_d, k, v, out_p, out_d, lse_p, lse_d, _stream_of(stream, q_p, q_d))
        return (out_p, out_d, lse_p, lse_d) if return_lse else (out_p, out_d)

    forward = run

    def plan_info(self) -> dict:
        """What the last plan decided: "fused" (one launch) or serial, grid, CTA split, predicted times."""
        return self._impl.plan_info()

    @property
    def workspace_bytes(self) -> int:
        return self._impl.workspace_bytes


# ---- paged KV append, norms, block tables ---------------------------------------------------

IndexArg = Union[Any, Tuple[Any, Any]]


def _index_pair(x: IndexArg, name: str) -> Tuple[Any, Any]:
    """(device, host) copies of an int32 index argument: a (device, host) tuple as given, a
    device array alone (its host copy is read back: a sync), or a host array alone (uploaded)."""
    if isinstance(x, (tuple, list)) and len(x) == 2 and not isinstance(x[0], int):
        return x[0], x[1]
    dev_type = None
    try:
        dev_type = x.__dlpack_device__()[0]
    except AttributeError:
        pass
    if dev_type in (2, 13):  # kDLCUDA, kDLCUDAManaged
        return x, None
    return None, x


def append_paged_kv(append_key: Any, append_value: Any, batch_indices: IndexArg, positions: IndexArg,
                    paged_kv_cache: Any, kv_indices: IndexArg, kv_indptr: IndexArg, kv_last_page_len: IndexArg,
                    kv_layout: str = "NHD", *, stream: Any = None) -> None:
    """Write new K/V tokens into their pages (``flashinfer.append_paged_kv_cache``'s arguments).

    ``append_key`` / ``append_value`` ``[nnz, num_kv_heads, head_dim]``; ``batch_indices[i]`` /
    ``positions[i]``: request and position of token i; the page table (``kv_indices``,
    ``kv_indptr``, ``kv_last_page_len``) must already include the new tokens. weft validates
    every index on the host before launching, so each index argument is needed in both copies:
    pass a ``(device_array, host_array)`` tuple (no copy, no sync: CUDA-graph capturable), a host
    array alone (uploaded on the stream into a stream-ordered temporary) or a device array alone
    (read back to the host: a stream sync). A rejected call writes nothing.
    """
    k, v = _kv_pair(paged_kv_cache)
    bi_d, bi_h = _index_pair(batch_indices, "batch_indices")
    po_d, po_h = _index_pair(positions, "positions")
    ix_d, ix_h = _index_pair(kv_indices, "kv_indices")
    ip_d, ip_h = _index_pair(kv_indptr, "kv_indptr")
    lp_d, lp_h = _index_pair(kv_last_page_len, "kv_last_page_len")
    _weft.append_paged_kv(append_key, append_value, bi_d, bi_h, po_d, po_h, k, v, ix_d, ix_h, ip_d, ip_h, lp_d, lp_h,
                          _layout_code(kv_layout), _stream_of(stream, append_key))


append_paged_kv_cache = append_paged_kv


def rmsnorm(input: Any, weight: Any, eps: float = 1e-6, *, out: Any = None, stream: Any = None) -> Any:
    """``out = input / sqrt(mean(input^2, -1) + eps) * weight`` over rows of ``[tokens, hidden]``
    (float16 / bfloat16, fp32 sums). ``out`` may be ``input`` (in place); allocated when None
    (torch / CuPy)."""
    if out is None:
        out = _empty_like(input, input.shape, str(input.dtype).replace("torch.", ""), "out")
    _weft.rmsnorm(input, weight, out, float(eps), _stream_of(stream, input))
    return out


def fused_add_rmsnorm(input: Any, residual: Any, weight: Any, eps: float = 1e-6, *, stream: Any = None) -> None:
    """In place, as vLLM / FlashInfer: ``residual += input`` (rounded to the storage dtype), then
    ``input = rmsnorm(residual) * weight``."""
    _weft.fused_add_rmsnorm(input, residual, weight, float(eps), _stream_of(stream, input))


# ---- merge of attention states ----------------------------------------------------------------

def _float_dtype_name(t: Any) -> str:
    return str(t.dtype).replace("torch.", "")


def _check_ndim(t: Any, ndim: int, name: str, shape: str) -> None:
    if len(getattr(t, "shape", ())) != ndim:
        raise _error(name, f"must be {ndim}-D {shape}, got shape {tuple(getattr(t, 'shape', ()))}")


def _mask_bytes(mask: Any) -> Any:
    """A boolean mask as its uint8 bytes (DLPack has no bool every framework exports)."""
    if mask is None or not str(mask.dtype).endswith("bool"):
        return mask
    if _framework(mask) == "torch":
        return mask.view(sys.modules["torch"].uint8)
    return mask.view("uint8")  # NumPy / CuPy


def merge_state(v_a: Any, s_a: Any, v_b: Any, s_b: Any, *, v_out: Any = None, s_out: Any = None,
                stream: Any = None) -> Tuple[Any, Any]:
    """Merge two attention states computed over disjoint KV segments A and B.

    ``v_a`` / ``v_b``: ``[seq_len, num_heads, head_dim]`` (float16, bfloat16 or float32; the
    outputs over each segment); ``s_a`` / ``s_b``: ``[seq_len, num_heads]`` float32, the
    log-sum-exp of each segment's logits. Returns ``(v, s)``: the attention output and LSE over
    ``A + B`` (``v_out`` / ``s_out`` written when given, else allocated, torch / CuPy).

    LSE convention: NATURAL log, as every weft kernel returns with ``return_lse=True``
    (``s = log(sum_j exp(logit_j))``). FlashInfer's merge functions and kernels use base-2 LSEs:
    multiply those by ``ln 2`` (``math.log(2)``) before passing them here. A state whose ``s`` is
    ``-inf`` covered no key and contributes nothing (its ``v`` is not read into the sum); a row
    with both at ``-inf`` gives ``v = 0``, ``s = -inf``. fp32 accumulation, one rounding to
    ``v``'s dtype, deterministic bits. Runs on the caller's current stream; CUDA-graph capturable
    when the outputs are given. Rejected inputs raise :class:`WeftError` naming the argument.
    """
    _check_ndim(v_a, 3, "v_a", "[seq_len, num_heads, head_dim]")
    if v_out is None:
        v_out = _empty_like(v_a, v_a.shape, _float_dtype_name(v_a), "v_out")
    if s_out is None:
        s_out = _empty_like(v_a, (v_a.shape[0], v_a.shape[1]), "float32", "s_out")
    _weft.merge_state(v_a, s_a, v_b, s_b, v_out, s_out, _stream_of(stream, v_a))
    return v_out, s_out


def merge_state_in_place(v: Any, s: Any, v_other: Any, s_other: Any, mask: Any = None, *,
                         stream: Any = None) -> None:
    """Merge ``(v_other, s_other)`` into ``(v, s)`` in place (shapes and conventions as
    :func:`merge_state`: natural-log LSE, ``-inf`` states contribute nothing). ``mask``
    (optional, ``[seq_len]`` bool or uint8 on the GPU): tokens whose entry is False / 0 are left
    untouched, so a fixed-shape (CUDA-graph) batch can merge only some of its rows."""
    _weft.merge_state_in_place(v, s, v_other, s_other, _mask_bytes(mask), _stream_of(stream, v))


def merge_states(v: Any, s: Any, *, v_out: Any = None, s_out: Any = None, stream: Any = None) -> Tuple[Any, Any]:
    """Merge ``num_states`` attention states of each (token, head), in state order.

    ``v``: ``[seq_len, num_states, num_heads, head_dim]`` (float16, bfloat16 or float32, any
    strides with a contiguous head_dim), ``s``: ``[seq_len, num_states, num_heads]`` float32
    natural-log LSEs. Returns ``(v, s)`` of shapes ``[seq_len, num_heads, head_dim]`` and
    ``[seq_len, num_heads]``. Conventions as :func:`merge_state` (FlashInfer's LSEs are base 2:
    scale them by ``ln 2`` first)."""
    _check_ndim(v, 4, "v", "[seq_len, num_states, num_heads, head_dim]")
    if v_out is None:
        v_out = _empty_like(v, (v.shape[0], v.shape[2], v.shape[3]), _float_dtype_name(v), "v_out")
    if s_out is None:
        s_out = _empty_like(v, (v.shape[0], v.shape[2]), "float32", "s_out")
    _weft.merge_states(v, s, v_out, s_out, _stream_of(stream, v))
    return v_out, s_out


def page_table_from_block_tables(block_tables: Any, seq_lens: Any, page_size: int,
                                 num_pages: int) -> Tuple[list, list, list]:
    """vLLM block tables (host int32 ``[batch, max_blocks_per_seq]``) and sequence lengths (host
    int32 ``[batch]``) to weft's page table ``(kv_indptr, kv_indices, kv_last_page_len)`` (lists)."""
    return _weft.page_table_from_block_tables(block_tables, seq_lens, int(page_size), int(num_pages))
