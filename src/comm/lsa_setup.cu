// LSA path setup: symmetric window + device communicator with one LSA barrier per CTA index.
#include <nccl.h>
#include <nccl_device.h>

#include <cstring>
#include <new>
#include <string>

#include "comm/comm_impl.h"
#include "common/cuda_check.h"
#include "weft/norm.h"

namespace weft::comm_detail {

static_assert(sizeof(ncclDevComm) <= sizeof(Communicator::Impl::devcomm),
              "Impl::devcomm too small for ncclDevComm");

namespace {
// Window base of every rank as mapped in this process (the copy engines take these addresses).
__global__ void read_lsa_bases(ncclWindow_t win, int world, char** bases) {
  const int q = threadIdx.x;
  if (q < world) bases[q] = static_cast<char*>(ncclGetLsaPointer(win, 0, q));
}

// Streams, events and peer addresses of the copy-engine kernel (CommKernel::kCopyEngine).
void ce_setup(Communicator::Impl& im) {
  char** d_bases = nullptr;
  WEFT_CUDA_CHECK(cudaMalloc(&d_bases, kCommMaxWorld * sizeof(char*)));
  read_lsa_bases<<<1, 32>>>(im.win, im.world, d_bases);
  const cudaError_t launch = cudaGetLastError();
  const cudaError_t copy =
      launch == cudaSuccess ? cudaMemcpy(im.peer_base, d_bases, im.world * sizeof(char*), cudaMemcpyDeviceToHost)
                            : launch;
  cudaFree(d_bases);
  WEFT_CUDA_CHECK(copy);
  // (The own rank's LSA pointer is a second mapping of im.sym in NCCL's flat LSA range, not
  // im.sym itself; both address the same memory.)
  WEFT_CUDA_CHECK(cudaStreamCreateWithFlags(&im.ce_push, cudaStreamNonBlocking));
  WEFT_CUDA_CHECK(cudaStreamCreateWithFlags(&im.ce_pull, cudaStreamNonBlocking));
  WEFT_CUDA_CHECK(cudaEventCreateWithFlags(&im.ce_start, cudaEventDisableTiming));
  WEFT_CUDA_CHECK(cudaEventCreateWithFlags(&im.ce_pulled, cudaEventDisableTiming));
  for (int j = 0; j < kMaxCeChunks; ++j) {
    WEFT_CUDA_CHECK(cudaEventCreateWithFlags(&im.ce_pushed[j], cudaEventDisableTiming));
    WEFT_CUDA_CHECK(cudaEventCreateWithFlags(&im.ce_reduced[j], cudaEventDisableTiming));
  }
}

void ce_teardown(Communicator::Impl& im) noexcept {
  for (int j = 0; j < kMaxCeChunks; ++j) {
    if (im.ce_pushed[j]) cudaEventDestroy(im.ce_pushed[j]);
    if (im.ce_reduced[j]) cudaEventDestroy(im.ce_reduced[j]);
    im.ce_pushed[j] = im.ce_reduced[j] = nullptr;
  }
  if (im.ce_start) cudaEventDestroy(im.ce_start);
  if (im.ce_pulled) cudaEventDestroy(im.ce_pulled);
  if (im.ce_push) cudaStreamDestroy(im.ce_push);
  if (im.ce_pull) cudaStreamDestroy(im.ce_pull);
  im.ce_start = im.ce_pulled = nullptr;
  im.ce_push = im.ce_pull = nullptr;
}

std::size_t round_up(std::size_t v, std::size_t a) { return (v + a - 1) / a * a; }
std::string version_string(int v) {
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
}
}  // namespace

std::string lsa_setup(Communicator::Impl& im) {
  int version = 0;
  if (ncclGetVersion(&version) != ncclSuccess) return "ncclGetVersion failed";
  if (version < NCCL_VERSION(2, 28, 0))
    return "NCCL runtime " + version_string(version) + " has no device API (needs >= 2.28)";
  // The device API is header-only inline code over structs (ncclDevComm, ncclWindow_vidmem)
  // whose layout changed between 2.28 patch releases: a kernel compiled against other headers
  // than the runtime library would read the wrong fields (and hang in a barrier).
  if (version != NCCL_VERSION_CODE && !im.opt.allow_nccl_mismatch)
    return "NCCL runtime " + version_string(version) + " differs from the headers weft was built with (" +
           version_string(NCCL_VERSION_CODE) +
           "): device-API struct layouts may differ (CommOptions::allow_nccl_mismatch overrides)";

  im.ctrl_off = 0;
  im.in_off = 4096;  // NCCL_WIN_REQUIRED_ALIGNMENT
  im.out_off = im.in_off + round_up(im.capacity, 4096);
  im.stage_off = im.out_off + round_up(im.capacity, 4096);
  // Staging: each rank's slice of the two-shot schedule is ceil(tokens / world) rows, so the
  // world slots of a slice hold up to (world - 1) rows more than capacity.
  im.stage_bytes = round_up(im.capacity + static_cast<std::size_t>(im.world - 1) * kNormMaxHidden * 2, 4096);
  im.sym_bytes = im.stage_off + im.stage_bytes;

  ncclResult_t r = ncclMemAlloc(&im.sym, im.sym_bytes);
  if (r != ncclSuccess) {
    im.sym = nullptr;
    return std::string("ncclMemAlloc(") + std::to_string(im.sym_bytes) + ") failed: " + ncclGetErrorString(r);
  }
  // Call headers start zeroed (a stale header would read as a mismatch).
  WEFT_CUDA_CHECK(cudaMemset(im.sym, 0, 4096));
  WEFT_CUDA_CHECK(cudaDeviceSynchronize());
  r = ncclCommWindowRegister(im.comm, im.sym, im.sym_bytes, &im.win, NCCL_WIN_COLL_SYMMETRIC);
  if (r != ncclSuccess) {
    ncclMemFree(im.sym);
    im.sym = nullptr;
    im.win = nullptr;
    return std::string("ncclCommWindowRegister(NCCL_WIN_COLL_SYMMETRIC) failed: ") + ncclGetErrorString(r);
  }

  ncclDevCommRequirements reqs;
  std::memset(&reqs, 0, sizeof(reqs));
  reqs.lsaBarrierCount = kCommMaxCtas;  // barrier index = CTA index
  ncclDevComm* dc = new (im.devcomm) ncclDevComm;
  std::memset(static_cast<void*>(dc), 0, sizeof(ncclDevComm));
  r = ncclDevCommCreate(im.comm, &reqs, dc);
  if (r != ncclSuccess) {
    lsa_teardown(im);
    return std::string("ncclDevCommCreate failed: ") + ncclGetErrorString(r);
  }
  im.devcomm_created = true;

  std::string why;
  if (dc->nRanks != im.world || dc->rank != im.rank)
    why = "device communicator reports rank " + std::to_string(dc->rank) + "/" + std::to_string(dc->nRanks) +
          ", expected " + std::to_string(im.rank) + "/" + std::to_string(im.world);
  else if (dc->lsaSize != im.world)
    why = "LSA team size " + std::to_string(dc->lsaSize) + " != world size " + std::to_string(im.world) +
          ": not every peer is load/store accessible";
  else if (dc->lsaRank != im.rank)
    why = "LSA rank " + std::to_string(dc->lsaRank) + " != world rank " + std::to_string(im.rank);
  else if (dc->lsaBarrier.nBarriers < kCommMaxCtas)
    why = "device communicator has " + std::to_string(dc->lsaBarrier.nBarriers) + " LSA barriers, asked " +
          std::to_string(kCommMaxCtas);
  if (!why.empty()) {
    lsa_teardown(im);
    return why;
  }
  try {
    ce_setup(im);
  } catch (...) {
    lsa_teardown(im);
    throw;
  }
  return std::string();
}

void lsa_teardown(Communicator::Impl& im) noexcept {
  ce_teardown(im);
  if (im.devcomm_created) {
    ncclDevCommDestroy(im.comm, reinterpret_cast<ncclDevComm*>(im.devcomm));
    im.devcomm_created = false;
  }
  if (im.win) {
    ncclCommWindowDeregister(im.comm, im.win);
    im.win = nullptr;
  }
  if (im.sym) {
    ncclMemFree(im.sym);
    im.sym = nullptr;
  }
}

}  // namespace weft::comm_detail
