"""Paged KV append, RMSNorm, attention-state merge and block-table conversion."""
from __future__ import annotations

import sys
from typing import Any, Tuple, Union

from . import _weft
from . import _error
from ._common import _empty_like, _framework, _kv_pair, _layout_code, _stream_of


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
