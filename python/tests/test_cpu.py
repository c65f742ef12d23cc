"""CPU-only tests (run in CI without a GPU or PyTorch): import, argument validation, error mapping.

Host arrays are NumPy arrays through DLPack; every rejected call raises weft.WeftError (a
ValueError) naming the argument, before anything touches CUDA."""
import numpy as np
import pytest

import weft


def _err(fn, argument):
    with pytest.raises(weft.WeftError) as info:
        fn()
    assert info.value.argument == argument, (info.value.argument, str(info.value))
    assert str(info.value).startswith(argument + ": ")
    assert isinstance(info.value, ValueError)
    return info.value


def i32(*v):
    return np.array(v, dtype=np.int32)


def test_import_and_api():
    assert weft.__version__ == "0.1.0"
    assert issubclass(weft.WeftError, ValueError)
    for name in weft.__all__:
        assert hasattr(weft, name), name
    assert isinstance(weft.cuda_available(), bool)
    e = weft.WeftError("q: bad", "q")
    assert e.argument == "q" and str(e) == "q: bad"


def test_rmsnorm_host_array_rejected_with_argument_name():
    x = np.zeros((4, 64), np.float16)
    w = np.ones(64, np.float16)
    e = _err(lambda: weft.rmsnorm(x, w, out=np.empty_like(x)), "x")  # weft::rmsnorm's name for input
    assert "cuda" in str(e).lower()
    _err(lambda: weft.fused_add_rmsnorm(x, x.copy(), w), "x")


def test_unsupported_dtype_names_the_argument():
    x = np.zeros((4, 64), np.float64)
    _err(lambda: weft.rmsnorm(x, np.ones(64, np.float16), out=np.empty((4, 64), np.float16)), "input")


def test_out_required_for_numpy():
    x = np.zeros((4, 64), np.float16)
    _err(lambda: weft.rmsnorm(x, np.ones(64, np.float16)), "out")


def test_decode_plan_validation():
    w = weft.BatchDecodeWithPagedKVCacheWrapper(None, "NHD")
    good = dict(num_qo_heads=8, num_kv_heads=2, head_dim=128, page_size=16)
    _err(lambda: w.plan(i32(0, 3, 2), i32(0, 1, 2), i32(1, 1), **good), "indptr")  # decreasing
    _err(lambda: w.plan(i32(0, 1, 2), np.array([0, 1], np.int64), i32(1, 1), **good), "indices")
    _err(lambda: w.plan(i32(0, 1, 2), i32(0, 1), i32(1, 17), **good), "last_page_len")  # > page_size
    _err(lambda: w.plan(i32(0, 1, 2), i32(0, 1), i32(1), **good), "last_page_len")  # size
    _err(lambda: w.plan(i32(0, 1, 2), i32(0, 1, 2), i32(1, 1), **good), "indices")  # != indptr[-1]
    bad_heads = dict(good, num_qo_heads=6, num_kv_heads=4)
    _err(lambda: w.plan(i32(0, 1, 2), i32(0, 1), i32(1, 1), **bad_heads), "num_qo_heads")
    _err(lambda: w.plan(i32(0, 1, 2), i32(0, 1), i32(1, 1), **dict(good, head_dim=96)), "head_dim")
    _err(lambda: w.plan(i32(0, 1, 2), i32(0, 1), i32(1, 1), **good, q_data_type="float32"), "q_data_type")
    _err(lambda: w.plan(i32(0, 1, 2), i32(0, 1), i32(1, 1), **good, pos_encoding_mode="ROPE_LLAMA"),
         "pos_encoding_mode")
    q = np.zeros((2, 8, 128), np.float16)
    _err(lambda: w.run(q, (q, q), out=q), "plan")  # run before plan


def test_wrapper_construction_errors():
    _err(lambda: weft.BatchDecodeWithPagedKVCacheWrapper(None, "XYZ"), "kv_layout")
    _err(lambda: weft.BatchDecodeWithPagedKVCacheWrapper(None, backend="fast"), "backend")
    _err(lambda: weft.BatchPrefillWithPagedKVCacheWrapper(None, cta_q=32), "cta_q")
    ws = np.zeros(1 << 20, np.uint8)
    _err(lambda: weft.BatchDecodeWithPagedKVCacheWrapper(ws), "workspace_buffer")  # host memory


def test_prefill_plan_validation():
    r = weft.BatchPrefillWithRaggedKVCacheWrapper()
    _err(lambda: r.plan(i32(0, 4, 2), i32(0, 4, 8), 8, 2, 128), "qo_indptr")
    _err(lambda: r.plan(i32(0, 4, 8), i32(0, 4), 8, 2, 128), "kv_indptr")
    _err(lambda: r.plan(i32(0, 4, 8), i32(0, 4, 8), 8, 2, 128, custom_mask=np.ones(4, bool)), "custom_mask")
    p = weft.BatchPrefillWithPagedKVCacheWrapper()
    _err(lambda: p.plan(i32(0, 4, 8), i32(0, 1), i32(0), i32(4), 8, 2, 128, 16), "indptr")  # batch mismatch
    _err(lambda: p.plan(i32(0, 4, 8), i32(0, 1, 2), i32(0, 1), i32(4, 4), 8, 2, 128, 16, head_dim_vo=64),
         "head_dim_vo")


def test_append_rejects_host_pools():
    k = np.zeros((4, 16, 2, 128), np.float16)
    new = np.zeros((3, 2, 128), np.float16)
    _err(lambda: weft.append_paged_kv(new, new, i32(0, 0, 1), i32(0, 1, 0), (k, k), i32(0, 1), i32(0, 1, 2),
                                      i32(2, 1)), "k_cache")


def test_page_table_from_block_tables():
    bt = np.array([[3, 1, 0], [2, 0, 0]], np.int32)
    indptr, indices, last = weft.page_table_from_block_tables(bt, i32(20, 5), page_size=16, num_pages=4)
    assert indptr == [0, 2, 3] and indices == [3, 1, 2] and last == [4, 5]
    _err(lambda: weft.page_table_from_block_tables(bt, i32(20, 5), 16, num_pages=3), "block_tables")
    _err(lambda: weft.page_table_from_block_tables(bt, i32(20), 16, 4), "seq_lens")


def test_block_table_wrapper_validation():
    _err(lambda: weft.BatchDecodeWithBlockTableWrapper(route="fast"), "route")
    _err(lambda: weft.BatchDecodeWithBlockTableWrapper(route="auto", router_table="/nonexistent/router.json"),
         "router_table")
    w = weft.BatchDecodeWithBlockTableWrapper(route="work_queue")
    _err(lambda: w.plan(i32(0, 1, 2), i32(5), 8, 2, 128, 16), "block_tables")  # not 2-D
    bt = np.zeros((1, 4), np.int64)
    _err(lambda: w.plan(bt, i32(5), 8, 2, 128, 16), "block_tables")  # not int32


def test_pod_plan_validation():
    _err(lambda: weft.PODWithPagedKVCacheWrapper(None, mode="fast"), "mode")
    _err(lambda: weft.PODWithPagedKVCacheWrapper(None, "XYZ"), "kv_layout")
    w = weft.PODWithPagedKVCacheWrapper()
    good = dict(num_qo_heads=8, num_kv_heads=2, head_dim=128, page_size=16)
    pre = (i32(0, 4), i32(0, 1), i32(0), i32(4))          # one prefill chunk of 4 tokens, 4 keys
    dec = (i32(0, 1, 2), i32(1, 2), i32(3, 3))            # two decodes of 3 keys
    _err(lambda: w.plan(i32(0, 4, 2), i32(0, 1, 2), i32(0, 1), i32(4, 4), *dec, **good), "qo_indptr")
    _err(lambda: w.plan(i32(0, 4), i32(0, 1, 2), i32(0, 1), i32(4, 4), *dec, **good), "prefill_kv_indptr")
    _err(lambda: w.plan(*pre, i32(0, 1, 2), i32(1, 2), i32(3, 17), **good), "last_page_len")
    _err(lambda: w.plan(*pre, i32(0, 2, 1), i32(1, 2), i32(3, 3), **good), "indptr")
    _err(lambda: w.plan(*pre, *dec, **dict(good, head_dim=256)), "head_dim")
    _err(lambda: w.plan(*pre, *dec, **dict(good, num_qo_heads=7)), "num_qo_heads")
    _err(lambda: w.plan(*pre, *dec, **good, q_data_type="float32"), "q_data_type")
    q = np.zeros((4, 8, 128), np.float16)
    _err(lambda: w.run(q, q, (q, q), out_p=q, out_d=q), "plan")  # run before plan


def test_merge_validation_names_the_argument():
    v = np.zeros((4, 2, 64), np.float16)
    s = np.zeros((4, 2), np.float32)
    vo, so = np.empty_like(v), np.empty_like(s)
    _err(lambda: weft.merge_state(v, s, v.copy(), s.copy()), "v_out")  # NumPy: outputs must be given
    e = _err(lambda: weft.merge_state(v, s, v.copy(), s.copy(), v_out=vo, s_out=so), "v_a")  # host memory
    assert "cuda" in str(e).lower()
    _err(lambda: weft.merge_state(v.astype(np.float64), s, v, s, v_out=vo, s_out=so), "v_a")  # dtype
    _err(lambda: weft.merge_state(v, s, v, s.astype(np.float64), v_out=vo, s_out=so), "s_b")
    _err(lambda: weft.merge_state(v[0], s, v, s), "v_a")  # 2-D
    _err(lambda: weft.merge_state_in_place(v, s, v.copy(), s.copy()), "v")
    _err(lambda: weft.merge_state_in_place(v, s, v.copy(), s.copy(), mask=np.ones(4, bool)), "v")
    _err(lambda: weft.merge_states(v, s, v_out=vo, s_out=so), "v")  # 3-D: no num_states dim
    v4 = np.zeros((4, 3, 2, 64), np.float16)
    _err(lambda: weft.merge_states(v4, np.zeros((4, 3, 2), np.float32)), "v_out")
    _err(lambda: weft.merge_states(v4, np.zeros((4, 3, 2), np.float32), v_out=vo, s_out=so), "v")
