#!/usr/bin/env bash
# ctest: libweft.so exports weft's public API (what include/weft/ declares, include/weft/export.h)
# and none of its internals.
#   check_exports.sh <libweft.so> "<components built, ;-separated>"
# Fails when an exported symbol names an internal namespace or the CUDA runtime's registration
# code, or when a public function of a built component is missing.
set -euo pipefail
lib=$1; components=";$2;"
syms=$(nm -D --defined-only -C "$lib" | cut -d' ' -f2-)  # "<type> <demangled name>"
echo "$lib: $(wc -l <<<"$syms") exported symbols ($(grep -c 'weft::' <<<"$syms") naming weft::)"
fail=0

# Internal namespaces need no list: the public ones are weft::, weft::check:: and weft::jit::
# (its internals are weft::jit_detail::), and every other
# lowercase name under weft:: (plan, decode, prefill, paged, attn, comm_detail, norm_detail, ...)
# is internal (public classes are CamelCase). Strip weft::check:: first, then look for the rest.
internal=$(sed 's/weft::check:://g; s/weft::jit:://g' <<<"$syms" | grep -E 'weft::[a-z_][a-z0-9_]*::' || true)
# nvcc's host-side stubs and registration (static today; must stay so).
cuda=$(grep -E '(^|[ :(])(__cuda|__device_stub|__fatbinwrap|__nv_)' <<<"$syms" || true)
if [ -n "$internal$cuda" ]; then
  echo "FAIL: internal symbols exported:"; printf '%s\n' "$internal" "$cuda" | grep . | head -50
  fail=1
fi

# A few public functions per built component ("component|symbol prefix"), typeinfo included:
# a weft::Error thrown in the library is caught by type only if its typeinfo is exported.
required=(
  "core|T weft::version()"
  "core|T weft::check::indptr("
  "core|T weft::TensorView::numel() const"
  "core|V typeinfo for weft::Error"
  "paged|T weft::append_paged_kv("
  "jit|T weft::jit::Variant::create("
  "attention|T weft::merge_states("
  "decode|T weft::BatchDecodeWrapper::plan("
  "prefill|T weft::BatchPrefillWrapper::workspace_size("
  "pod|T weft::BatchPODAttention::plan("
  "norm|T weft::rmsnorm("
  "comm|T weft::Communicator::Communicator("
  "comm|T weft::plan_token_split("
  "tp|T weft::TpLayer::plan("
)
for r in "${required[@]}"; do
  c=${r%%|*}; s=${r#*|}
  [[ $components == *";$c;"* ]] || continue
  if ! grep -qF -- "$s" <<<"$syms"; then
    echo "FAIL: public symbol missing: $s"; fail=1
  fi
done
[ "$fail" = 0 ] && echo "exports OK (components: ${2//;/ })"
exit "$fail"
