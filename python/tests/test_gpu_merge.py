"""GPU tests of the merge of attention states (weft.merge_state, merge_state_in_place, merge_states)
against a float64 torch reference, and on real weft outputs: a request's KV split in two, attention
run on each part with its LSE, the merge equal to one run over the whole KV (decode: two page
ranges; prefill: a non-causal shared prefix + a causal suffix, the cascade by hand). Skipped (with
the reason) without a GPU or PyTorch."""
import pytest

import weft
from conftest import TORCH as torch, requires_gpu
from test_gpu import TOL, make_paged, ref_attention

pytestmark = requires_gpu

MTOL = {"float16": 2e-3, "bfloat16": 1.6e-2, "float32": 1e-5}  # one rounding of values in [-2, 2]


def _dt(name):
    return getattr(torch, name)


def _states(gen, seq, n, heads, d, dtype, p_empty=0.2):
    """Random states [seq, n, heads, d] / [seq, n, heads] (natural-log LSEs over 24 nats), a fifth of
    them at -inf with NaN values (they must not be read into the sum), row (0, head 0) all -inf."""
    v = torch.rand(seq, n, heads, d, generator=gen) * 4 - 2
    s = torch.rand(seq, n, heads, generator=gen) * 24 - 12
    s[torch.rand(seq, n, heads, generator=gen) < p_empty] = float("-inf")
    s[0, :, 0] = float("-inf")
    v = v.to(_dt(dtype))
    v[torch.isinf(s)] = float("nan")
    return v.cuda(), s.cuda()


def ref_merge(v, s):
    """float64: v [seq, n, heads, d], s [seq, n, heads] -> ([seq, heads, d], [seq, heads])."""
    v, s = v.double(), s.double()
    lse = torch.logsumexp(s, dim=1)  # -inf where every state is -inf
    w = torch.exp(s - lse[:, None]).nan_to_num(0.0)[..., None]  # (-inf) - (-inf) = nan -> 0
    o = torch.where(w > 0, w * v, torch.zeros((), dtype=v.dtype, device=v.device)).sum(1)
    return o, lse


def _poisoned(shape, dtype):
    return torch.full(shape, float("nan"), dtype=dtype, device="cuda")


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("d", [64, 128, 256])
@pytest.mark.parametrize("n", [1, 2, 5, 17])
def test_merge_states_vs_reference(dtype, d, n):
    gen = torch.Generator().manual_seed(100 + n * 7 + d)
    seq, heads = 9, 4
    v, s = _states(gen, seq, n, heads, d, dtype)
    vo, so = _poisoned((seq, heads, d), _dt(dtype)), _poisoned((seq, heads), torch.float32)
    out_v, out_s = weft.merge_states(v, s, v_out=vo, s_out=so)
    assert out_v is vo and out_s is so
    rv, rs = ref_merge(v, s)
    torch.testing.assert_close(out_v.double(), rv, atol=MTOL[dtype], rtol=MTOL[dtype])
    torch.testing.assert_close(out_s.double(), rs, atol=1e-5, rtol=1e-5)
    assert torch.all(out_v[0, 0] == 0) and out_s[0, 0] == float("-inf")
    v2, s2 = weft.merge_states(v, s)  # allocated outputs; the same bits
    assert torch.equal(v2, out_v) and torch.equal(s2, out_s)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("d", [64, 128, 256])
def test_merge_state_vs_reference(dtype, d):
    gen = torch.Generator().manual_seed(200 + d)
    v, s = _states(gen, 33, 2, 5, d, dtype)
    # v[:, 0] / v[:, 1]: strided views (token stride 2 * heads * d)
    out_v, out_s = weft.merge_state(v[:, 0], s[:, 0], v[:, 1], s[:, 1])
    rv, rs = ref_merge(v, s)
    torch.testing.assert_close(out_v.double(), rv, atol=MTOL[dtype], rtol=MTOL[dtype])
    torch.testing.assert_close(out_s.double(), rs, atol=1e-5, rtol=1e-5)
    # the n-way form over the same two states gives the same bits
    nv, ns = weft.merge_states(v, s)
    assert torch.equal(nv, out_v) and torch.equal(ns, out_s)


def test_merge_state_in_place_with_mask():
    gen = torch.Generator().manual_seed(300)
    v, s = _states(gen, 12, 2, 4, 128, "bfloat16")
    a_v, a_s = v[:, 0].clone(), s[:, 0].clone()
    want_v, want_s = weft.merge_state(a_v, a_s, v[:, 1], s[:, 1])
    mask = torch.tensor([i % 3 != 1 for i in range(12)], device="cuda")
    weft.merge_state_in_place(a_v, a_s, v[:, 1], s[:, 1], mask)
    keep = ~mask
    assert torch.equal(a_v[mask], want_v[mask]) and torch.equal(a_s[mask], want_s[mask])
    torch.testing.assert_close(a_v[keep], v[:, 0][keep], equal_nan=True, atol=0, rtol=0)
    torch.testing.assert_close(a_s[keep], s[:, 0][keep], atol=0, rtol=0)
    b_v, b_s = v[:, 0].clone(), s[:, 0].clone()
    weft.merge_state_in_place(b_v, b_s, v[:, 1], s[:, 1])
    assert torch.equal(b_v, want_v) and torch.equal(b_s, want_s)


def test_merge_bad_inputs_name_the_argument():
    v = torch.zeros(4, 2, 64, dtype=torch.float16, device="cuda")
    s = torch.zeros(4, 2, dtype=torch.float32, device="cuda")
    vo = torch.full_like(v, 7.0)

    def err(fn, argument):
        with pytest.raises(weft.WeftError) as info:
            fn()
        assert info.value.argument == argument, (info.value.argument, str(info.value))

    err(lambda: weft.merge_state(v, s, v.clone(), s.half()), "s_b")
    err(lambda: weft.merge_state(v, s, v[:, :, :32].clone(), s), "v_b")
    err(lambda: weft.merge_state(v, s, v.clone(), s.clone(), v_out=vo.bfloat16()), "v_out")
    err(lambda: weft.merge_state(v, s, v.clone(), s.clone(), v_out=v), "v_out")  # overlaps v_a
    err(lambda: weft.merge_state_in_place(v, s, v, s.clone()), "v_other")
    err(lambda: weft.merge_state_in_place(v, s, v.clone(), s.clone(), torch.ones(5, dtype=torch.bool, device="cuda")),
        "mask")
    err(lambda: weft.merge_states(v[:, None].expand(4, 3, 2, 64), s[:, None], v_out=vo), "s")
    err(lambda: weft.merge_state(v[..., :60].contiguous(), s, v[..., :60].contiguous(), s), "v_a")  # 120 bytes
    torch.cuda.synchronize()
    assert torch.all(vo == 7.0)  # rejected calls wrote nothing


def _split_pages(indptr, indices, last, page):
    """Each request's pages cut in two: A = the first half (full pages; none for a one-page
    request), B = the rest with the request's last_page_len."""
    i32 = lambda x: torch.tensor(x, dtype=torch.int32)
    ia, xa, la, ib, xb, lb = [0], [], [], [0], [], []
    for b in range(len(last)):
        pages = indices[int(indptr[b]):int(indptr[b + 1])].tolist()
        cut = len(pages) // 2
        xa += pages[:cut]
        ia.append(len(xa))
        la.append(page if cut else 0)
        xb += pages[cut:]
        ib.append(len(xb))
        lb.append(int(last[b]))
    return (i32(ia), i32(xa), i32(la)), (i32(ib), i32(xb), i32(lb))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_merge_two_halves_of_a_decode(dtype):
    gen = torch.Generator().manual_seed(400)
    page, hq, hkv, d = 16, 8, 2, 128
    lens = [1, 40, 300, 1000, 17]
    cache, (indptr, indices, last), ks, vs = make_paged(lens, page, hkv, d, _dt(dtype), gen=gen)
    q = (torch.rand(len(lens), hq, d, generator=gen) * 2 - 1).to(_dt(dtype)).cuda()

    def attend(table):
        w = weft.BatchDecodeWithPagedKVCacheWrapper()
        w.plan(*table, hq, hkv, d, page, q_data_type=_dt(dtype))
        return w.run(q, cache, return_lse=True)

    full_o, full_s = attend((indptr, indices, last))
    part_a, part_b = _split_pages(indptr, indices, last, page)
    oa, sa = attend(part_a)
    ob, sb = attend(part_b)
    assert torch.all(torch.isinf(sa[0])) and torch.all(oa[0] == 0)  # request 0: A has no key
    mo, ms = weft.merge_state(oa, sa, ob, sb)
    for b in range(len(lens)):
        o_ref, l_ref = ref_attention(q[b:b + 1], ks[b], vs[b])
        torch.testing.assert_close(mo[b].double(), o_ref[0], atol=2 * TOL[dtype], rtol=2 * TOL[dtype])
        torch.testing.assert_close(ms[b].double(), l_ref[0], atol=1e-3, rtol=1e-3)
    torch.testing.assert_close(mo, full_o, atol=2 * TOL[dtype], rtol=2 * TOL[dtype])
    torch.testing.assert_close(ms, full_s, atol=1e-3, rtol=1e-3)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_merge_prefix_and_suffix_of_a_prefill(dtype):
    """Cascade by hand: queries attend to a shared-prefix part without a mask and to the rest
    causally; the merge equals one causal prefill over the whole KV."""
    gen = torch.Generator().manual_seed(500)
    hq, hkv, d = 8, 2, 128
    kv_lens, q_lens, prefix = [100, 513, 64, 7], [30, 37, 64, 1], [60, 400, 0, 3]  # suffix >= q_len
    i32 = lambda x: torch.tensor(x, dtype=torch.int32)
    cum = lambda xs: i32([0] + torch.tensor(xs).cumsum(0).tolist())
    dt = _dt(dtype)
    ks = [(torch.rand(n, hkv, d, generator=gen) * 2 - 1).to(dt).cuda() for n in kv_lens]
    vs = [(torch.rand(n, hkv, d, generator=gen) * 2 - 1).to(dt).cuda() for n in kv_lens]
    qo = cum(q_lens)
    q = (torch.rand(int(qo[-1]), hq, d, generator=gen) * 2 - 1).to(dt).cuda()

    def attend(lens, k, v, causal):
        w = weft.BatchPrefillWithRaggedKVCacheWrapper()
        w.plan(qo, cum(lens), hq, hkv, d, causal=causal, q_data_type=dt)
        return w.run(q, torch.cat(k), torch.cat(v), return_lse=True)

    full_o, full_s = attend(kv_lens, ks, vs, True)
    pre_o, pre_s = attend(prefix, [k[:p] for k, p in zip(ks, prefix)], [v[:p] for v, p in zip(vs, prefix)], False)
    suf = [n - p for n, p in zip(kv_lens, prefix)]
    suf_o, suf_s = attend(suf, [k[p:] for k, p in zip(ks, prefix)], [v[p:] for v, p in zip(vs, prefix)], True)
    r2 = slice(int(qo[2]), int(qo[3]))
    assert torch.all(torch.isinf(pre_s[r2])) and torch.all(pre_o[r2] == 0)  # request 2: no prefix
    mo, ms = weft.merge_state(pre_o, pre_s, suf_o, suf_s)
    for b in range(len(q_lens)):
        s, e = int(qo[b]), int(qo[b + 1])
        o_ref, l_ref = ref_attention(q[s:e], ks[b], vs[b], causal=True)
        torch.testing.assert_close(mo[s:e].double(), o_ref, atol=2 * TOL[dtype], rtol=2 * TOL[dtype])
        torch.testing.assert_close(ms[s:e].double(), l_ref, atol=1e-3, rtol=1e-3)
    torch.testing.assert_close(mo, full_o, atol=2 * TOL[dtype], rtol=2 * TOL[dtype])
    torch.testing.assert_close(ms, full_s, atol=1e-3, rtol=1e-3)
