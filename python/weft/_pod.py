"""POD-Attention wrapper: hybrid steps of prefill chunks and decodes on one paged cache."""
from __future__ import annotations

from typing import Any, Optional

from . import _weft
from . import _error
from ._common import (
    _dtype_code,
    _empty_like,
    _kv_pair,
    _layout_code,
    _sm_scale,
    _soft_cap,
    _stream_of,
)


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
