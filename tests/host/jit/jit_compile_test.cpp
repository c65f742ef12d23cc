// weft::jit without a GPU (CI): NVRTC compiles decode and prefill specializations of example
// variants to sm_90a CUBIN; the disk cache's keys, hits, rejection of corrupt / partial / foreign
// files and concurrent writers; errors in user source.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "jit/disk_cache.h"
#include "tests/common/test_util.h"
#include "weft/error.h"
#include "weft/jit.h"
#include "weft/jit_examples.h"

namespace {
namespace fs = std::filesystem;
using weft::jit::Options;
using weft::jit::Variant;
using weft::jit::VariantSource;
namespace wj = weft::jit_detail;

// A fresh directory per test, removed at the end.
struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() /
           ("weft_jit_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

bool is_elf(const std::vector<char>& b) {
  return b.size() > 64 && b[0] == 0x7f && b[1] == 'E' && b[2] == 'L' && b[3] == 'F';
}

std::vector<fs::path> cache_files(const fs::path& dir) {
  std::vector<fs::path> v;
  if (fs::exists(dir))
    for (const auto& e : fs::directory_iterator(dir)) v.push_back(e.path());
  return v;
}

TEST(JitCompile, DecodeAndPrefillToCubinThenDiskHit) {
  TempDir dir;
  Options opt;
  opt.cache_dir = dir.path.string();
  auto v = Variant::create(weft::jit::examples::soft_cap(), opt);
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<char> dec = v->compile("decode_tc1", "bf16", 128, "sm_90a");
  const std::vector<char> pre = v->compile("prefill_q64_kv64", "bf16", 128, "sm_90a");
  const double cold_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_TRUE(is_elf(dec));
  EXPECT_TRUE(is_elf(pre));
  EXPECT_EQ(v->stats().compiled, 2);
  EXPECT_EQ(v->stats().disk_hits, 0);
  EXPECT_EQ(cache_files(dir.path).size(), 2u);  // no temporary file left behind
  std::printf("cold compile decode + prefill (sm_90a, this machine): %.2f s\n", cold_s);

  // Another Variant (as another process would) with the same source and options: disk hits,
  // byte-identical images, nothing compiled.
  auto w = Variant::create(weft::jit::examples::soft_cap(), opt);
  EXPECT_EQ(w->compile("decode_tc1", "bf16", 128, "sm_90a"), dec);
  EXPECT_EQ(w->compile("prefill_q64_kv64", "bf16", 128, "sm_90a"), pre);
  EXPECT_EQ(w->stats().compiled, 0);
  EXPECT_EQ(w->stats().disk_hits, 2);
}

TEST(JitCompile, KeyCoversSourceOptionsAndSpecialization) {
  TempDir dir;
  Options opt;
  opt.cache_dir = dir.path.string();
  auto a = Variant::create(weft::jit::examples::soft_cap(), opt);
  a->compile("decode_cc", "f16", 64, "sm_90a");
  // Other NVRTC options: another key.
  Options opt2 = opt;
  opt2.nvrtc_options = {"-DWEFT_TEST_KEY=1"};
  auto b = Variant::create(weft::jit::examples::soft_cap(), opt2);
  b->compile("decode_cc", "f16", 64, "sm_90a");
  EXPECT_EQ(b->stats().compiled, 1);
  // Other source text (a comment): another key.
  VariantSource s = weft::jit::examples::soft_cap();
  s.source += "// changed\n";
  auto c = Variant::create(s, opt);
  c->compile("decode_cc", "f16", 64, "sm_90a");
  EXPECT_EQ(c->stats().compiled, 1);
  EXPECT_EQ(cache_files(dir.path).size(), 3u);
  // The same source again: a hit.
  auto d = Variant::create(weft::jit::examples::soft_cap(), opt);
  d->compile("decode_cc", "f16", 64, "sm_90a");
  EXPECT_EQ(d->stats().disk_hits, 1);
  EXPECT_EQ(d->stats().compiled, 0);
}

TEST(JitCompile, CorruptAndPartialFilesAreIgnoredAndReplaced) {
  TempDir dir;
  Options opt;
  opt.cache_dir = dir.path.string();
  const VariantSource src = weft::jit::examples::sigmoid();
  std::vector<char> good;
  {
    auto v = Variant::create(src, opt);
    good = v->compile("decode_cc", "bf16", 64, "sm_90a");
  }
  const auto files = cache_files(dir.path);
  ASSERT_EQ(files.size(), 1u);
  const fs::path f = files[0];
  // Truncated (a writer that died without the rename cannot leave this, but a copy can).
  fs::resize_file(f, fs::file_size(f) / 2);
  // A stray temporary file of a dead writer next to it.
  std::ofstream(dir.path / ("." + f.stem().string() + ".999.0.tmp")) << "partial";
  {
    auto v = Variant::create(src, opt);
    EXPECT_EQ(v->compile("decode_cc", "bf16", 64, "sm_90a"), good);
    EXPECT_EQ(v->stats().compiled, 1);  // the truncated file was a miss
  }
  // One flipped payload byte: the checksum rejects it.
  {
    std::fstream io(f, std::ios::in | std::ios::out | std::ios::binary);
    io.seekg(100);
    char c = 0;
    io.read(&c, 1);
    c ^= 0x5a;
    io.seekp(100);
    io.write(&c, 1);
  }
  {
    auto v = Variant::create(src, opt);
    EXPECT_EQ(v->compile("decode_cc", "bf16", 64, "sm_90a"), good);
    EXPECT_EQ(v->stats().compiled, 1);
  }
  // Rewritten intact: the next one hits.
  auto v = Variant::create(src, opt);
  EXPECT_EQ(v->compile("decode_cc", "bf16", 64, "sm_90a"), good);
  EXPECT_EQ(v->stats().disk_hits, 1);
}

TEST(JitCompile, SyntaxErrorIsAnErrorWithLogAndLine) {
  VariantSource s;
  s.source = "struct Params {};\nstruct Variant : weft::jit::VariantBase<Params> {\n  __device__ float logit(float score, const Row&, int) const { return score +; }\n};\n";
  s.name = "broken.cu";
  auto v = Variant::create(s, Options{});
  try {
    v->compile("decode_tc1", "f16", 128, "sm_90a");
    FAIL() << "no error";
  } catch (const weft::Error& e) {
    EXPECT_EQ(e.argument(), "jit.source");
    const std::string what = e.what();
    EXPECT_NE(what.find("broken.cu at line 3"), std::string::npos) << what;
    EXPECT_NE(what.find("broken.cu(3): error"), std::string::npos) << what;  // NVRTC's log
  }
  // A Variant that is not a VariantBase<Params>, and a params_size that does not match.
  VariantSource t = weft::jit::examples::soft_cap();
  t.params_size = 8;
  t.params_align = 4;
  auto w = Variant::create(t, Options{});
  try {
    w->compile("decode_tc1", "f16", 128, "sm_90a");
    FAIL() << "no error";
  } catch (const weft::Error& e) {
    EXPECT_EQ(e.argument(), "jit.source");
    EXPECT_NE(std::string(e.what()).find("params_size"), std::string::npos) << e.what();
  }
}

TEST(JitCompile, CreateValidatesTheDescription) {
  using weft::test::thrown_argument;
  VariantSource s = weft::jit::examples::soft_cap();
  s.variant = "Var iant";
  EXPECT_EQ(thrown_argument([&] { Variant::create(s); }), "source.variant");
  s = weft::jit::examples::soft_cap();
  s.params_align = 3;
  EXPECT_EQ(thrown_argument([&] { Variant::create(s); }), "source.params_align");
  s = weft::jit::examples::soft_cap();
  s.params_size = weft::jit::kMaxParamsBytes + 4;
  EXPECT_EQ(thrown_argument([&] { Variant::create(s); }), "source.params_size");
  s = weft::jit::examples::soft_cap();
  Options o;
  o.device_include_dir = "/nonexistent";
  EXPECT_EQ(thrown_argument([&] { Variant::create(s, o); }), "options.device_include_dir");
  auto v = Variant::create(weft::jit::examples::soft_cap());
  EXPECT_EQ(thrown_argument([&] { v->compile("decode_tc3", "f16", 128, "sm_90a"); }), "jit.kind");
  EXPECT_EQ(thrown_argument([&] { v->compile("decode_tc1", "f32", 128, "sm_90a"); }), "jit.dtype");
}

TEST(JitDiskCache, KeysRoundTripAndRejections) {
  TempDir dir;
  wj::DiskCache cache(dir.path.string());
  const wj::CacheKey k1 = wj::make_cache_key("a");
  const wj::CacheKey k2 = wj::make_cache_key("b");
  EXPECT_FALSE(k1 == k2);
  EXPECT_FALSE(wj::make_cache_key("abcdefgh1") == wj::make_cache_key("abcdefgh2"));
  EXPECT_EQ(k1.hex().size(), 32u);
  std::vector<char> out;
  EXPECT_FALSE(cache.load(k1, out));  // missing
  const std::vector<char> payload(1000, 'x');
  ASSERT_TRUE(cache.store(k1, payload));
  ASSERT_TRUE(cache.load(k1, out));
  EXPECT_EQ(out, payload);
  // A file under another key's name (copied or renamed): the stored key does not match.
  fs::copy_file(cache.path_of(k1), cache.path_of(k2));
  EXPECT_FALSE(cache.load(k2, out));
  // Appended bytes (length check) and an empty file.
  std::ofstream(cache.path_of(k1), std::ios::app | std::ios::binary) << "junk";
  EXPECT_FALSE(cache.load(k1, out));
  std::ofstream(cache.path_of(k1), std::ios::trunc | std::ios::binary);
  EXPECT_FALSE(cache.load(k1, out));
  // Disabled cache: never hits, never writes.
  wj::DiskCache off("");
  EXPECT_FALSE(off.store(k1, payload));
  EXPECT_FALSE(off.load(k1, out));
}

// Concurrent writers of one key (threads here; processes rename the same way): every load
// returns one complete payload, never a mix or a partial file; no temporary file remains.
TEST(JitDiskCache, ConcurrentWritersNeverExposePartialFiles) {
  TempDir dir;
  wj::DiskCache cache(dir.path.string());
  const wj::CacheKey key = wj::make_cache_key("shared");
  constexpr int kWriters = 6, kRounds = 25;
  constexpr std::size_t kBytes = 256 * 1024;
  std::atomic<bool> stop{false};
  std::atomic<int> loads{0}, bad{0};
  std::thread reader([&] {
    std::vector<char> out;
    while (!stop.load()) {
      if (cache.load(key, out)) {
        ++loads;
        // a payload is kBytes copies of one writer's byte
        bool uniform = out.size() == kBytes;
        for (std::size_t i = 1; uniform && i < out.size(); ++i) uniform = out[i] == out[0];
        if (!uniform) ++bad;
      }
    }
  });
  std::vector<std::thread> writers;
  for (int w = 0; w < kWriters; ++w)
    writers.emplace_back([&, w] {
      const std::vector<char> p(kBytes, static_cast<char>('a' + w));
      for (int r = 0; r < kRounds; ++r) EXPECT_TRUE(cache.store(key, p));
    });
  for (auto& t : writers) t.join();
  stop = true;
  reader.join();
  EXPECT_EQ(bad.load(), 0);
  std::vector<char> out;
  ASSERT_TRUE(cache.load(key, out));
  EXPECT_EQ(cache_files(dir.path).size(), 1u);  // only the final file
  std::printf("concurrent: %d successful loads during %d stores\n", loads.load(), kWriters * kRounds);
}

// The same with writer PROCESSES (fork): temporary names differ by process id, and rename()
// replaces the file atomically, so a reader in the parent never sees a partial or mixed image.
TEST(JitDiskCache, ConcurrentWriterProcesses) {
  TempDir dir;
  const fs::path sub = dir.path / "nested" / "cache";  // created on first store, parents too
  wj::DiskCache cache(sub.string());
  const wj::CacheKey key = wj::make_cache_key("processes");
  constexpr int kWriters = 4, kRounds = 20;
  constexpr std::size_t kBytes = 512 * 1024;
  std::vector<pid_t> pids;
  for (int w = 0; w < kWriters; ++w) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      const std::vector<char> p(kBytes, static_cast<char>('k' + w));
      int failed = 0;
      for (int r = 0; r < kRounds; ++r) failed += !cache.store(key, p);
      ::_exit(failed == 0 ? 0 : 1);
    }
    pids.push_back(pid);
  }
  int loads = 0, bad = 0, running = kWriters;
  std::vector<char> out;
  while (running > 0) {
    if (cache.load(key, out)) {
      ++loads;
      bool uniform = out.size() == kBytes;
      for (std::size_t i = 1; uniform && i < out.size(); ++i) uniform = out[i] == out[0];
      bad += !uniform;
    }
    running = 0;
    for (pid_t& pid : pids) {
      if (pid == 0) continue;
      int status = 0;
      if (::waitpid(pid, &status, WNOHANG) == pid) {
        EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "a writer failed to store";
        pid = 0;
      } else {
        ++running;
      }
    }
  }
  EXPECT_EQ(bad, 0);
  ASSERT_TRUE(cache.load(key, out));
  EXPECT_EQ(cache_files(sub).size(), 1u);  // only the final file: every temporary was renamed
  std::printf("processes: %d successful loads during %d stores\n", loads, kWriters * kRounds);
}

}  // namespace
