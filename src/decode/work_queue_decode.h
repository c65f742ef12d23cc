// Internal: decode on the compact work-queue schedule (attention/plan/work_queue.h), over a
// native block table. plan() builds the schedule from the table's true row lengths and copies
// only the bytes it uses (CompactWorkPlan) to the workspace; run() launches the decode kernel's
// generic item path on a 1-D grid of the tasks, then the segmented merge of the split rows
// (skipped when nothing was split). Not a CUDA-graph replay path: the grid follows the plan.
//
// Workspace: [metadata region: metadata_cap bytes][partial O: max_tasks x 16 x D fp32]
// [partial LSE: max_tasks x 16 fp32]. A plan with more tasks than max_tasks, or metadata past
// the cap, is rejected (weft::Error naming "max_tasks").
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "attention/plan/work_queue.h"
#include "attention/staging_ring.h"
#include "weft/attention.h"
#include "weft/dtype.h"
#include "weft/paged_kv.h"
#include "weft/tensor.h"

namespace weft::decode {

class WorkQueueDecode {
 public:
  static std::size_t workspace_size(int32_t max_batch, int32_t num_kv_heads, int32_t head_dim, int32_t max_tasks);
  WorkQueueDecode(int32_t max_batch, int32_t num_qo_heads, int32_t num_kv_heads, int32_t head_dim,
                  int32_t max_tasks);
  ~WorkQueueDecode();
  WorkQueueDecode(const WorkQueueDecode&) = delete;
  WorkQueueDecode& operator=(const WorkQueueDecode&) = delete;

  // chunk: keys per split (a multiple of 16), 0 for no split (one task per row and head).
  // rows_checked: the caller has run paged::check_block_table_rows(table, page_size, -1) on this
  // table (BatchDecodeWrapper's kAuto route); the rows are then not checked a second time.
  void plan(const BlockTable& table, int32_t chunk, int32_t page_size, DType dtype, KVLayout layout,
            const AttentionVariant& variant, void* workspace, std::size_t workspace_bytes, cudaStream_t stream,
            bool rows_checked = false);
  void run(const TensorView& q, const PagedKVCache& cache, const BlockTable& table, const TensorView& out,
           const TensorView* lse, cudaStream_t stream);

  const plan::WorkPlan& work_plan() const { return plan_; }
  std::size_t uploaded_bytes() const { return compact_.bytes.size(); }

 private:
  int32_t max_batch_, hq_, hkv_, d_, max_tasks_;
  std::size_t metadata_cap_ = 0;
  int32_t stages_ = 0, warps_ = 0;
  plan::StagingRing staging_;  // pinned slots of metadata_cap_ bytes (the decode wrapper's ring)
  bool planned_ = false;
  int32_t page_size_ = 0;
  DType dtype_ = DType::kBFloat16;
  KVLayout layout_ = KVLayout::kNHD;
  AttentionVariant variant_;
  void* workspace_ = nullptr;
  std::vector<int32_t> page_base_;
  plan::WorkPlan plan_;
  plan::CompactWorkPlan compact_;
};

}  // namespace weft::decode
