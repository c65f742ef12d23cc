// Host thread fan-out for the float64 references (prefill-sized references are ~1e11 operations:
// too slow on one core). Pure C++ (std::thread); used by reference/*.cpp only.
//
// Determinism contract: callers split work so that every output element is computed by exactly
// one task with a fixed arithmetic order; the thread count then never changes any result bit.
#pragma once
#include <cstdint>
#include <functional>

namespace weft::ref {

// Threads the references use: set_num_threads(n > 0) if called, else the environment variable
// WEFT_REF_THREADS (a positive integer), else std::thread::hardware_concurrency() (at least 1).
int num_threads();
// n > 0 overrides WEFT_REF_THREADS / hardware_concurrency for this process; n <= 0 clears it.
void set_num_threads(int n);

// Runs fn(t) for every t in [0, n_tasks), on min(num_threads(), n_tasks) threads (the calling
// thread is one of them). Tasks are taken in increasing order from a shared counter. The first
// exception thrown by a task is rethrown here after all threads have stopped.
void parallel_for(int64_t n_tasks, const std::function<void(int64_t)>& fn);

}  // namespace weft::ref
