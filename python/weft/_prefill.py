"""Batch prefill wrappers: paged and ragged KV."""
from __future__ import annotations

from typing import Any, Optional

from . import _weft
from . import _error
from ._common import (
    _check_no_rope,
    _dtype_code,
    _empty_like,
    _kv_pair,
    _layout_code,
    _sm_scale,
    _soft_cap,
    _stream_of,
)


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
