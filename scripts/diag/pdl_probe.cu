// Probe (issue 28, the partition's launch order): does work launched normally after a
// programmatic dependent launch (PDL) wait for the PRIMARY kernel, when the secondary kernel never
// executes griddepcontrol.wait? The POD partition could order its prefill (primary: triggers its
// dependents at each CTA's start) before its decode (secondary) with PDL instead of two graph
// branches, but only if what follows in the stream still sees both kernels complete.
//   primary:   G CTAs; griddepcontrol.launch_dependents at the start, spin ~spin_us, then set done[b]
//   secondary: launched with cudaLaunchAttributeProgrammaticStreamSerialization, no wait; marks
//              whether it started while the primary was still running (any done[b] == 0)
//   observer:  normal launch after the secondary; counts done[b] == 0 (a violation if > 0)
// Eager on one stream and captured into a CUDA graph, `reps` times each.
//   nvcc -O2 -arch=sm_90a -o pdl_probe scripts/diag/pdl_probe.cu && ./pdl_probe [reps] [spin_us]
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#define CK(x)                                                                              \
  do {                                                                                     \
    cudaError_t e_ = (x);                                                                  \
    if (e_ != cudaSuccess) {                                                               \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                        \
    }                                                                                      \
  } while (0)

__global__ void primary(int* done, long long spin_cycles) {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  const long long t0 = clock64();
  while (clock64() - t0 < spin_cycles) {
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    atomicExch(&done[blockIdx.x], 1);
  }
}

__global__ void secondary(const int* done, int g, int* overlapped) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  int unfinished = 0;
  for (int b = 0; b < g; ++b) unfinished += atomicAdd(const_cast<int*>(&done[b]), 0) == 0;
  if (unfinished > 0) atomicAdd(overlapped, 1);
}

__global__ void observer(const int* done, int g, int* violations) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  int unfinished = 0;
  for (int b = 0; b < g; ++b) unfinished += atomicAdd(const_cast<int*>(&done[b]), 0) == 0;
  if (unfinished > 0) atomicAdd(violations, 1);
}

static void enqueue(cudaStream_t s, int* done, int* counters, int g, long long spin) {
  CK(cudaMemsetAsync(done, 0, sizeof(int) * g, s));
  primary<<<g, 128, 0, s>>>(done, spin);
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(1);
  cfg.blockDim = dim3(32);
  cfg.stream = s;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  CK(cudaLaunchKernelEx(&cfg, secondary, static_cast<const int*>(done), g, counters + 0));
  observer<<<1, 32, 0, s>>>(done, g, counters + 1);
}

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 200;
  const double spin_us = argc > 2 ? std::atof(argv[2]) : 50.0;
  int dev = 0, sms = 0, clock_khz = 0;
  CK(cudaGetDevice(&dev));
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  CK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, dev));
  const int g = sms;  // one wave: every CTA resident, so the trigger fires early
  const long long spin = static_cast<long long>(spin_us * clock_khz / 1000.0);
  int *done = nullptr, *counters = nullptr;
  CK(cudaMalloc(&done, sizeof(int) * g));
  CK(cudaMalloc(&counters, sizeof(int) * 4));
  CK(cudaMemset(counters, 0, sizeof(int) * 4));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

  for (int r = 0; r < reps; ++r) enqueue(s, done, counters, g, spin);
  CK(cudaStreamSynchronize(s));
  int eager[2];
  CK(cudaMemcpy(eager, counters, sizeof(eager), cudaMemcpyDeviceToHost));

  CK(cudaMemset(counters, 0, sizeof(int) * 4));
  cudaGraph_t graph;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  enqueue(s, done, counters, g, spin);
  CK(cudaStreamEndCapture(s, &graph));
  cudaGraphExec_t exec;
  CK(cudaGraphInstantiate(&exec, graph, 0));
  for (int r = 0; r < reps; ++r) CK(cudaGraphLaunch(exec, s));
  CK(cudaStreamSynchronize(s));
  int graphed[2];
  CK(cudaMemcpy(graphed, counters, sizeof(graphed), cudaMemcpyDeviceToHost));
  std::printf("pdl_probe: %d CTAs x %.0f us primary, %d reps each\n", g, spin_us, reps);
  std::printf("  eager: secondary overlapped the primary %d / %d; observer saw the primary unfinished %d / %d\n",
              eager[0], reps, eager[1], reps);
  std::printf("  graph: secondary overlapped the primary %d / %d; observer saw the primary unfinished %d / %d\n",
              graphed[0], reps, graphed[1], reps);
  return 0;
}
