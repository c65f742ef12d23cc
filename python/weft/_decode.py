"""Batch decode wrappers: paged KV (CSR page table) and native block tables."""
from __future__ import annotations

import sys
from typing import Any, Optional, Sequence, Tuple

from . import _weft
from . import _error
from ._common import (
    _DECODE_BACKENDS,
    _check_no_rope,
    _dtype_code,
    _empty_like,
    _fp8_code,
    _kv_pair,
    _layout_code,
    _scale_array,
    _sm_scale,
    _soft_cap,
    _stream_of,
)


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
    ``prefix_cost_model`` (weft::DecodeOptions::prefix_cost_model, default on): a sharing plan not
    predicted faster than the standard decode plan falls back to it (``plan_info()["prefix_fallback"]``;
    ``"predicted_share_us"`` / ``"predicted_decode_us"`` are the model's times); False shares whenever
    pages are shared.

    CUDA graphs: run() allocates nothing (when ``out`` is given) and never syncs the host; the
    page table lives in wrapper-owned device buffers at fixed addresses, so a graph captured
    around run() replays correctly after a later plan() with other lengths (same q/out/cache
    tensors, batch <= max_batch_size, pages <= max_num_pages, same dtype/layout/heads). With
    ``share_prefixes`` a re-plan may change the kernels run() launches (the sharing plan, its wide
    kernel, or the standard decode after a fallback: ``plan_info()["prefix_sharing"]`` /
    ``["prefix_fallback"]``); re-capture when those change.
    """

    def __init__(self, float_workspace_buffer: Any = None, kv_layout: str = "NHD",
                 use_cuda_graph: bool = False, *, max_batch_size: int = 0, max_num_pages: int = 0,
                 backend: str = "auto", share_prefixes: bool = False, prefix_cost_model: bool = True):
        self._layout = _layout_code(kv_layout)
        if backend not in _DECODE_BACKENDS:
            raise _error("backend", f"must be one of {sorted(_DECODE_BACKENDS)}, got {backend!r}")
        self._impl = _weft.Decode(int(max_batch_size), int(max_num_pages), _DECODE_BACKENDS[backend],
                                  bool(share_prefixes), float_workspace_buffer, bool(prefix_cost_model))
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
