// weft-bench: measures the ceilings, runs the registered case groups, prints a table and
// optionally writes JSON.
//   weft-bench [--group G]... [--filter SUBSTR]... [--quick] [--reps N] [--json PATH]
//              [--commit SHA] [--no-ceilings] [--pat-wide-min-rows N] [--list]
// Exit status: 0 ok, 1 a group failed (exception / CUDA error) or bad usage, 2 no usable GPU.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <exception>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "harness.h"
#include "json.h"

namespace {

using weft::bench::Context;
using weft::bench::JsonWriter;
using weft::bench::Result;

void usage(const char* argv0) {
  std::printf(
      "usage: %s [options]\n"
      "  --group G       run group G (repeatable or comma-separated; default: all groups)\n"
      "  --filter S      only cases whose name contains S (repeatable: any of them)\n"
      "  --quick         fewer reps (and fewer sizes, where groups honour ctx.quick())\n"
      "  --reps N        timed runs per case (overrides every group's default)\n"
      "  --warmup-s S    seconds of the once-per-process GPU warm-up (default 1; 0 under ncu)\n"
      "  --json PATH     write every result as JSON\n"
      "  --commit SHA    recorded in JSON (default: env WEFT_COMMIT)\n"
      "  --no-ceilings   skip measuring the copy/read/gemm ceilings (fractions become null)\n"
      "  --pat-wide-min-rows N  pat group: wide packs from N rows (DecodeOptions::prefix_wide_min_rows)\n"
      "  --pat-wide-min-keys N  pat group: ... and N node keys (DecodeOptions::prefix_wide_min_keys)\n"
      "  --list          list registered groups and exit\n",
      argv0);
}

std::string utc_timestamp() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::tm tm{};
  gmtime_r(&t, &tm);
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

struct Failure {
  std::string group, error;
};

std::string write_json(const std::string& path, const Context* ctx, const std::string& command,
                       const std::string& commit, const std::vector<Failure>& failures,
                       const std::vector<std::string>& groups, bool quick) {
  JsonWriter j;
  j.begin_object();
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  if (ctx) {
    j.key("gpu").value(std::string(ctx->props().name));
    j.key("sm_count").value(ctx->sm_count());
    j.key("compute_capability")
        .value(std::to_string(ctx->props().major) + "." + std::to_string(ctx->props().minor));
    j.key("l2_bytes").value(static_cast<long long>(ctx->l2_bytes()));
    j.key("global_mem_bytes").value(static_cast<long long>(ctx->props().totalGlobalMem));
  }
  j.key("driver").value(driver);
  j.key("runtime").value(runtime);
  j.key("commit").value(commit);
  j.key("command").value(command);
  j.key("timestamp").value(utc_timestamp());
  j.key("quick").value(quick);
  j.key("groups").begin_array();
  for (const auto& g : groups) j.value(g);
  j.end_array();
  j.key("ceilings").begin_object();
  if (ctx) {
    auto nz = [&](double v) {
      if (v > 0)
        j.value(v);
      else
        j.null();
    };
    j.key("copy_gbps");
    nz(ctx->ceilings().copy_gbps);
    j.key("read_gbps");
    nz(ctx->ceilings().read_gbps);
    j.key("gemm_tflops");
    nz(ctx->ceilings().gemm_tflops);
  }
  j.end_object();
  j.key("failures").begin_array();
  for (const auto& f : failures) {
    j.begin_object().key("group").value(f.group).key("error").value(f.error).end_object();
  }
  j.end_array();
  j.key("cases").begin_array();
  if (ctx) {
    for (const Result& r : ctx->results()) {
      j.begin_object();
      j.key("name").value(r.name);
      j.key("group").value(r.group);
      j.key("params").begin_object();
      for (const auto& [k, v] : r.params) j.key(k).value(v);
      j.end_object();
      if (r.error.empty()) {
        j.key("ms").value(r.ms);
        j.key("bytes").value(r.bytes);
        j.key("flops").value(r.flops);
        j.key("gb_per_s").value(Context::gb_per_s(r));
        j.key("tflops").value(Context::tflops(r));
      } else {
        j.key("error").value(r.error);
      }
      j.key("ceiling").value(r.ceiling);
      j.key("fraction_of_ceiling").value(ctx->fraction_of_ceiling(r));
      j.key("extra").begin_object();
      for (const auto& [k, v] : r.extra) j.key(k).value(v);
      j.end_object();
      j.end_object();
    }
  }
  j.end_array();
  j.end_object();
  if (path.empty()) return "";
  std::ofstream f(path);
  if (!f) return "cannot open " + path + " for writing";
  f << j.str();
  f.close();
  if (!f) return "failed writing " + path;
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  Context::Options opt;
  std::vector<std::string> groups_wanted;
  std::string json_path, commit;
  bool list = false;
  if (const char* c = std::getenv("WEFT_COMMIT")) commit = c;
  std::string command;
  for (int i = 0; i < argc; ++i) command += (i ? " " : "") + std::string(argv[i]);

  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&](const char* what) -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "weft-bench: %s needs a value\n", what);
        std::exit(1);
      }
      return argv[++i];
    };
    if (a == "--group") {
      std::string v = next("--group") + ",";  // "decode,prefill" works too
      for (std::size_t p = 0, q; (q = v.find(',', p)) != std::string::npos; p = q + 1)
        if (q > p && std::find(groups_wanted.begin(), groups_wanted.end(), v.substr(p, q - p)) ==
                         groups_wanted.end())
          groups_wanted.push_back(v.substr(p, q - p));
    }
    else if (a == "--filter") opt.filters.push_back(next("--filter"));
    else if (a == "--quick") opt.quick = true;
    else if (a == "--reps") {
      std::string v = next("--reps");
      char* end = nullptr;
      long n = std::strtol(v.c_str(), &end, 10);
      if (!end || *end || n <= 0 || n > 100000) {
        std::fprintf(stderr, "weft-bench: --reps expects a positive integer, got '%s'\n", v.c_str());
        return 1;
      }
      opt.reps = static_cast<int>(n);
    } else if (a == "--warmup-s") {
      const std::string v = next("--warmup-s");
      char* end = nullptr;
      const double x = std::strtod(v.c_str(), &end);
      if (v.empty() || *end != '\0' || !(x >= 0 && x <= 60)) {
        std::fprintf(stderr, "weft-bench: --warmup-s expects seconds in [0, 60], got '%s'\n", v.c_str());
        return 1;
      }
      opt.warmup_s = x;
    } else if (a == "--json") json_path = next("--json");
    else if (a == "--commit") commit = next("--commit");
    else if (a == "--no-ceilings") opt.ceilings = false;
    else if (a == "--pat-wide-min-rows") {
      const std::string v = next("--pat-wide-min-rows");
      char* end = nullptr;
      const long n = std::strtol(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || n <= 0 || n > (1 << 20)) {
        std::fprintf(stderr, "weft-bench: --pat-wide-min-rows expects a positive integer, got '%s'\n", v.c_str());
        return 2;
      }
      opt.pat_wide_min_rows = static_cast<int>(n);
    }
    else if (a == "--pat-wide-min-keys") {
      const std::string v = next("--pat-wide-min-keys");
      char* end = nullptr;
      const long n = std::strtol(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || n <= 0 || n > (1 << 30)) {
        std::fprintf(stderr, "weft-bench: --pat-wide-min-keys expects a positive integer, got '%s'\n", v.c_str());
        return 2;
      }
      opt.pat_wide_min_keys = static_cast<int>(n);
    }
    else if (a == "--list") list = true;
    else if (a == "-h" || a == "--help") {
      usage(argv[0]);
      return 0;
    } else {
      std::fprintf(stderr, "weft-bench: unknown argument '%s'\n", a.c_str());
      usage(argv[0]);
      return 1;
    }
  }

  const auto registered = weft::bench::registered_groups();
  if (list) {
    for (const auto& g : registered) std::printf("%s\n", g.name.c_str());
    return 0;
  }
  std::vector<weft::bench::GroupEntry> to_run;
  if (groups_wanted.empty()) {
    to_run = registered;
  } else {
    for (const auto& w : groups_wanted) {
      bool found = false;
      for (const auto& g : registered)
        if (g.name == w) {
          to_run.push_back(g);
          found = true;
        }
      if (!found) {
        std::fprintf(stderr, "weft-bench: no group '%s'; registered:", w.c_str());
        for (const auto& g : registered) std::fprintf(stderr, " %s", g.name.c_str());
        std::fprintf(stderr, "\n");
        return 1;
      }
    }
  }
  std::vector<std::string> group_names;
  for (const auto& g : to_run) group_names.push_back(g.name);

  int ndev = 0;
  cudaError_t e = cudaGetDeviceCount(&ndev);
  if (e != cudaSuccess || ndev == 0) {
    std::fprintf(stderr,
                 "weft-bench: no usable CUDA GPU (%s); the benchmark needs one (sm_90a: H100/H200).\n",
                 e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    return 2;
  }

  std::vector<Failure> failures;
  std::unique_ptr<Context> ctx;
  try {
    ctx = std::make_unique<Context>(opt);
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "weft-bench: cannot set up the device: %s\n", ex.what());
    return 2;
  }
  const cudaDeviceProp& p = ctx->props();
  std::printf("weft-bench on %s (sm_%d%d, %d SMs, L2 %.0f MiB, %.1f GiB)%s\n", p.name, p.major,
              p.minor, p.multiProcessorCount, p.l2CacheSize / 1048576.0,
              p.totalGlobalMem / 1073741824.0, opt.quick ? " [quick]" : "");
  auto t0 = std::chrono::steady_clock::now();
  if (opt.ceilings) {
    try {
      ctx->measure_ceilings();
    } catch (const std::exception& ex) {
      std::fprintf(stderr, "weft-bench: ceilings failed: %s\n", ex.what());
      failures.push_back({"ceilings", ex.what()});
    }
  }
  for (const auto& g : to_run) {
    ctx->begin_group(g.name);
    auto tg = std::chrono::steady_clock::now();
    for (auto fn : g.fns) {
      try {
        fn(*ctx);
        weft::bench::check_cuda(cudaStreamSynchronize(ctx->stream()), "group stream sync",
                                __FILE__, __LINE__);
        weft::bench::check_cuda(cudaGetLastError(), "cudaGetLastError after group", __FILE__,
                                __LINE__);
      } catch (const std::exception& ex) {
        std::fprintf(stderr, "weft-bench: group %s failed: %s\n", g.name.c_str(), ex.what());
        failures.push_back({g.name, ex.what()});
      }
    }
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - tg).count();
    std::printf("-- group %s: %.1f s\n", g.name.c_str(), s);
  }
  double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("\nweft-bench: %zu cases, %zu failures, %.1f s\n", ctx->results().size(),
              failures.size(), total);
  if (!json_path.empty()) {
    std::string err = write_json(json_path, ctx.get(), command, commit, failures, group_names,
                                 opt.quick);
    if (!err.empty()) {
      std::fprintf(stderr, "weft-bench: %s\n", err.c_str());
      return 1;
    }
    std::printf("wrote %s\n", json_path.c_str());
  }
  return failures.empty() ? 0 : 1;
}
