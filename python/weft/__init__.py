"""weft: CUDA attention kernels for LLM serving, from Python.

FlashInfer-style wrappers over weft's plan/run C++ API (``include/weft/``):

* :class:`BatchDecodeWithPagedKVCacheWrapper` -- batch decode on a paged KV cache
* :class:`BatchDecodeWithBlockTableWrapper` -- batch decode over a vLLM-style block table, with a
  route choice (balanced split-KV, work queue, no split, or "auto": the calibrated router)
* :class:`BatchPrefillWithPagedKVCacheWrapper` -- ragged queries against a paged KV cache
* :class:`BatchPrefillWithRaggedKVCacheWrapper` -- ragged queries against contiguous K/V
* :func:`append_paged_kv` -- write new K/V tokens into their pages
* :func:`merge_state`, :func:`merge_state_in_place`, :func:`merge_states` -- merge attention
  states (output + natural-log LSE) computed over disjoint KV segments
* :func:`rmsnorm`, :func:`fused_add_rmsnorm`
* :func:`page_table_from_block_tables` -- vLLM block tables to weft's page table (host)

Tensors cross through DLPack (PyTorch, CuPy, JAX, NumPy for host arrays) without copies. Kernels
run on the caller's current stream: PyTorch's current stream for torch tensors, CuPy's for CuPy
arrays, the legacy default stream otherwise; an explicit ``stream=`` (an int ``cudaStream_t``, a
``torch.cuda.Stream`` or a ``cupy.cuda.Stream``) overrides it.

Every rejected call raises :class:`WeftError` (a ``ValueError``) whose ``argument`` names the
offending argument (``weft::Error::argument()``), before anything is launched.

LSEs (``return_lse=True``, the merge functions) are natural logs; FlashInfer's are base 2.
"""
from __future__ import annotations

import ctypes
import glob
import os
import sys

__all__ = [
    "WeftError",
    "BatchDecodeWithPagedKVCacheWrapper",
    "BatchDecodeWithBlockTableWrapper",
    "BatchPrefillWithPagedKVCacheWrapper",
    "BatchPrefillWithRaggedKVCacheWrapper",
    "PODWithPagedKVCacheWrapper",
    "append_paged_kv",
    "merge_state",
    "merge_state_in_place",
    "merge_states",
    "rmsnorm",
    "fused_add_rmsnorm",
    "page_table_from_block_tables",
    "cuda_available",
    "__version__",
]


class WeftError(ValueError):
    """A call rejected by weft. ``argument`` names the offending argument (or ``"CUDA"`` for a
    CUDA failure not caused by input); ``str(e)`` is ``"<argument>: <what was expected>"``."""

    def __init__(self, message: str, argument: str | None = None):
        super().__init__(message)
        self.argument = argument


def _error(argument: str, what: str) -> WeftError:
    return WeftError(f"{argument}: {what}", argument)


def _load_extension():
    try:
        from . import _weft  # noqa: F401
        return _weft
    except ImportError as first:
        # libweft needs the CUDA runtime (libcudart.so.13, libcublas.so.13). When the system
        # loader does not know where they are, look in CUDA_HOME and in pip's nvidia packages.
        if "lib" not in str(first):
            # Not a missing shared library: most often an extension built for another CPython
            # (Python then reports a "partially initialized module"); say what is installed.
            here = os.path.dirname(os.path.abspath(__file__))
            built = sorted(f for f in os.listdir(here) if f.startswith("_weft"))
            raise ImportError(
                f"weft's extension did not load under CPython {sys.version.split()[0]}: {first}. "
                f"Extension files in {here}: {built or 'none'} (an .abi3 module needs CPython >= 3.12; "
                "a cpython-3XY module needs that version): rebuild the package for this Python."
            ) from first
        roots = [os.environ.get("CUDA_HOME", ""), os.environ.get("CUDA_PATH", ""), "/usr/local/cuda"]
        dirs = [os.path.join(r, sub) for r in roots if r for sub in ("lib64", "lib")]
        for p in sys.path:
            dirs += glob.glob(os.path.join(p, "nvidia", "*", "lib"))
        loaded = False
        for name in ("libcudart.so.13", "libcublasLt.so.13", "libcublas.so.13"):
            for d in dirs:
                f = os.path.join(d, name)
                if os.path.exists(f):
                    ctypes.CDLL(f, mode=ctypes.RTLD_GLOBAL)
                    loaded = True
                    break
        if not loaded:
            raise
        from . import _weft  # noqa: F401
        return _weft


_weft = _load_extension()
_weft._set_error_class(WeftError)
__version__ = _weft.version()

from ._common import cuda_available  # noqa: E402
from ._decode import BatchDecodeWithBlockTableWrapper, BatchDecodeWithPagedKVCacheWrapper  # noqa: E402
from ._ops import (  # noqa: E402
    append_paged_kv,
    fused_add_rmsnorm,
    merge_state,
    merge_state_in_place,
    merge_states,
    page_table_from_block_tables,
    rmsnorm,
)
from ._pod import PODWithPagedKVCacheWrapper  # noqa: E402
from ._prefill import BatchPrefillWithPagedKVCacheWrapper, BatchPrefillWithRaggedKVCacheWrapper  # noqa: E402
