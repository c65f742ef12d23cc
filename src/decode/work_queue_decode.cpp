// WorkQueueDecode (work_queue_decode.h).
#include "decode/work_queue_decode.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "attention/heuristics.h"
#include "attention/variant_host.h"
#include "common/cuda_check.h"
#include "decode/decode_plan.h"
#include "decode/launch.h"
#include "decode/run_checks.h"
#include "paged/block_table.h"
#include "weft/validate.h"

namespace weft::decode {

namespace {
// Metadata bytes of a schedule of up to T tasks (each at most one merge source) for B rows: 9
// item arrays + 2 source arrays of T, 4 merge arrays of T + indptr, the request list, the
// header and 16-byte padding per array.
std::size_t metadata_bound(int64_t max_batch, int64_t max_tasks) {
  return 256 + (15 * max_tasks + 1 + max_batch) * sizeof(int32_t) + 18 * 16;
}
std::size_t align256(std::size_t x) { return (x + 255) / 256 * 256; }
}  // namespace

std::size_t WorkQueueDecode::workspace_size(int32_t max_batch, int32_t num_kv_heads, int32_t head_dim,
                                            int32_t max_tasks) {
  (void)num_kv_heads;
  WEFT_CHECK_ARG(max_tasks >= 1, "max_tasks", "must be >= 1, got " << max_tasks);
  check::head_dim_supported(head_dim, "head_dim");
  const std::size_t rows = std::size_t(max_tasks) * kPlanTileQ;
  return align256(metadata_bound(max_batch, max_tasks)) + align256(rows * head_dim * 4) + align256(rows * 4);
}

WorkQueueDecode::WorkQueueDecode(int32_t max_batch, int32_t num_qo_heads, int32_t num_kv_heads, int32_t head_dim,
                                 int32_t max_tasks)
    : max_batch_(max_batch), hq_(num_qo_heads), hkv_(num_kv_heads), d_(head_dim), max_tasks_(max_tasks) {
  WEFT_CHECK_ARG(max_batch >= 0, "max_batch", "must be >= 0, got " << max_batch);
  WEFT_CHECK_ARG(max_tasks >= 1, "max_tasks", "must be >= 1, got " << max_tasks);
  WEFT_CHECK_ARG(num_kv_heads >= 1 && num_qo_heads % num_kv_heads == 0, "num_kv_heads",
                 "must divide num_qo_heads = " << num_qo_heads << ", got " << num_kv_heads);
  WEFT_CHECK_ARG(num_qo_heads / num_kv_heads <= kPlanTileQ, "num_qo_heads",
                 "the work queue runs 16-row tasks: GQA group <= 16");
  check::head_dim_supported(head_dim, "head_dim");
  metadata_cap_ = align256(metadata_bound(max_batch, max_tasks));
  stages_ = decode_stages(head_dim);
  warps_ = decode_warps(head_dim);
  prepare_decode_work_plan(head_dim);
  // The decode wrapper's staging ring (staging_ring.h): plan() waits on the GPU only when every
  // slot's copy is still queued, not on the previous plan's copy every time.
  staging_.allocate(metadata_cap_, heuristics::plan_staging_slots(metadata_cap_));
}

WorkQueueDecode::~WorkQueueDecode() = default;  // the staging ring waits for its copies

void WorkQueueDecode::plan(const BlockTable& table, int32_t chunk, int32_t page_size, DType dtype, KVLayout layout,
                           const AttentionVariant& variant, void* workspace, std::size_t workspace_bytes,
                           cudaStream_t stream, bool rows_checked) {
  if (!rows_checked) paged::check_block_table_rows(table, page_size, -1);
  WEFT_CHECK_ARG(table.batch_size <= max_batch_, "table.batch_size",
                 "must be <= max_batch = " << max_batch_ << ", got " << table.batch_size);
  WEFT_CHECK_ARG(dtype == DType::kFloat16 || dtype == DType::kBFloat16, "dtype",
                 "expected f16 or bf16, got " << dtype_name(dtype));
  // (decode::work_queue_runs_variant, router.h: these three and, checked by the wrapper, a run-time
  // compiled variant)
  WEFT_CHECK_ARG(variant.mask != MaskMode::kCustom && variant.window_left < 0 && variant.alibi_slopes == nullptr,
                 "variant", "the work queue supports neither custom masks, windows nor ALiBi yet");
  WEFT_CHECK_ARG(variant.sm_scale >= 0 && std::isfinite(variant.sm_scale), "variant.sm_scale",
                 "must be finite and >= 0, got " << variant.sm_scale);
  check::workspace(workspace, workspace_bytes, workspace_size(max_batch_, hkv_, d_, max_tasks_), "workspace");
  const int32_t batch = table.batch_size;
  page_base_.resize(size_t(batch));
  for (int32_t b = 0; b < batch; ++b) page_base_[b] = static_cast<int32_t>(b * table.row_stride);
  plan::WorkQueueConfig cfg;
  cfg.num_kv_heads = hkv_;
  cfg.group_size = hq_ / hkv_;
  cfg.tile_rows = kPlanTileQ;
  cfg.chunk = chunk;
  cfg.kv_granularity = kPlanKVTile;
  plan::make_work_queue(table.seq_lens.host, page_base_.data(), batch, cfg, plan_);
  WEFT_CHECK_ARG(plan_.num_items() <= max_tasks_, "max_tasks",
                 "the schedule has " << plan_.num_items() << " tasks, the workspace holds " << max_tasks_);
  plan::pack_compact(plan_, kPlanTileQ, compact_);
  WEFT_CHECK_ARG(compact_.bytes.size() <= metadata_cap_, "max_tasks", "schedule metadata exceeds the workspace");
  const int32_t slot = staging_.acquire();
  unsigned char* staging = staging_.slot(slot);
  std::memcpy(staging, compact_.bytes.data(), compact_.bytes.size());
  WEFT_CUDA_CHECK(cudaMemcpyAsync(workspace, staging, compact_.bytes.size(), cudaMemcpyHostToDevice, stream));
  staging_.enqueued(slot, stream);
  page_size_ = page_size;
  dtype_ = dtype;
  layout_ = layout;
  variant_ = variant;
  workspace_ = workspace;
  planned_ = true;
}

void WorkQueueDecode::run(const TensorView& q, const PagedKVCache& cache, const BlockTable& table,
                          const TensorView& out, const TensorView* lse, cudaStream_t stream) {
  WEFT_CHECK_ARG(planned_, "plan", "run() called before plan()");
  const int64_t batch = plan_.batch;
  PlannedShape ps;
  ps.batch = batch;
  ps.num_qo_heads = hq_;
  ps.num_kv_heads = hkv_;
  ps.head_dim = d_;
  ps.page_size = page_size_;
  ps.dtype = dtype_;
  ps.layout = layout_;
  ps.lse_required = variant_.return_lse;
  check_views(ps, q, out, lse);
  validate_paged_kv(cache, table);
  check_cache(ps, cache);
  WEFT_CHECK_ARG(table.batch_size == batch, "table.batch_size", "planned " << batch << ", got " << table.batch_size);
  for (int32_t b = 0; b < table.batch_size; ++b)
    WEFT_CHECK_ARG(table.seq_lens.host[b] == plan_.kv_len[b], "table.seq_lens",
                   "seq_lens[" << b << "] is " << table.seq_lens.host[b] << " but the plan has " << plan_.kv_len[b]);
  if (plan_.num_items() == 0) return;

  const std::size_t rows = std::size_t(max_tasks_) * kPlanTileQ;
  unsigned char* base = static_cast<unsigned char*>(workspace_);
  float* partial_o = reinterpret_cast<float*>(base + metadata_cap_);
  float* partial_lse = reinterpret_cast<float*>(base + metadata_cap_ + align256(rows * d_ * 4));
  const plan::WorkPlanPointers w = plan::compact_pointers(compact_, workspace_, partial_o, partial_lse);
  LaunchArgs a;
  a.q = &q;
  a.out = &out;
  a.lse = lse;
  a.cache = &cache;
  a.blocks = &table;
  a.group_size = hq_ / hkv_;
  a.var = attn::variant_params(variant_, d_);
  a.dtype = dtype_;
  a.head_dim = d_;
  a.path = DecodePath::kTensorCore;
  a.grid = plan_.num_items();  // 1-D grid: one task per CTA
  a.stages = stages_;
  a.warps = warps_;
  a.tile_rows = kPlanTileQ;
  // Merge grid: one CTA per merge up to 1024 (each loops over the rest).
  const int merges = plan_.num_merges();
  launch_decode_work_plan(a, w, stream, merges > 0 ? std::min(merges, 1024) : 1, merges);
}

}  // namespace weft::decode
