// weft._weft: the merge of attention states (weft/merge.h). Outputs are allocated by the Python
// layer (weft/_ops.py); here every array becomes a TensorView named as the caller knows it.
#include "ext_common.h"
#include "weft/merge.h"

namespace weft_py {
namespace {

void merge_state(const Array& v_a, const Array& s_a, const Array& v_b, const Array& s_b, const Array& v_out,
                 const OptArray& s_out, uintptr_t stream) {
  // Views in argument order (a call's arguments are evaluated in no fixed order): the first bad one is named.
  const weft::TensorView va = view(v_a, "v_a"), sa = view(s_a, "s_a"), vb = view(v_b, "v_b"), sb = view(s_b, "s_b");
  const weft::TensorView vo = view(v_out, "v_out");
  const weft::TensorView so = s_out ? view(*s_out, "s_out") : weft::TensorView();
  weft::merge_state(va, sa, vb, sb, vo, s_out ? &so : nullptr, as_stream(stream));
}

void merge_state_in_place(const Array& v, const Array& s, const Array& v_other, const Array& s_other,
                          const OptArray& mask, uintptr_t stream) {
  const weft::TensorView tv = view(v, "v"), ts = view(s, "s"), vo = view(v_other, "v_other");
  const weft::TensorView so = view(s_other, "s_other");
  const weft::TensorView m = mask ? view(*mask, "mask") : weft::TensorView();
  weft::merge_state_in_place(tv, ts, vo, so, mask ? &m : nullptr, as_stream(stream));
}

void merge_states(const Array& v, const Array& s, const Array& v_out, const OptArray& s_out, uintptr_t stream) {
  const weft::TensorView tv = view(v, "v"), ts = view(s, "s"), vo = view(v_out, "v_out");
  const weft::TensorView so = s_out ? view(*s_out, "s_out") : weft::TensorView();
  weft::merge_states(tv, ts, vo, s_out ? &so : nullptr, as_stream(stream));
}

}  // namespace

void bind_merge(nb::module_& m) {
  m.def("merge_state", &merge_state, "v_a"_a, "s_a"_a, "v_b"_a, "s_b"_a, "v_out"_a, "s_out"_a.none(), "stream"_a);
  m.def("merge_state_in_place", &merge_state_in_place, "v"_a, "s"_a, "v_other"_a, "s_other"_a, "mask"_a.none(),
        "stream"_a);
  m.def("merge_states", &merge_states, "v"_a, "s"_a, "v_out"_a, "s_out"_a.none(), "stream"_a);
}

}  // namespace weft_py
