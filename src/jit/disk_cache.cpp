#include "jit/disk_cache.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>

namespace weft::jit_detail {
namespace {

constexpr char kMagic[8] = {'W', 'E', 'F', 'T', 'J', 'I', 'T', '1'};
constexpr std::size_t kHeaderBytes = 40;

void put_u64(char* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}
uint64_t get_u64(const char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

// Whole-buffer write, retrying short writes and EINTR.
bool write_all(int fd, const char* p, std::size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += w;
    n -= static_cast<std::size_t>(w);
  }
  return true;
}

}  // namespace

uint64_t fnv1a64(const void* data, std::size_t n, uint64_t seed) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t h = seed;
  for (std::size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

CacheKey make_cache_key(const std::string& material) {
  CacheKey k;
  k.hi = fnv1a64(material.data(), material.size());
  // Second hash: 8-byte words through a multiply-xorshift mix (splitmix64's finalizer), length in.
  uint64_t h = 0x9e3779b97f4a7c15ull ^ material.size();
  for (std::size_t i = 0; i < material.size(); i += 8) {
    uint64_t w = 0;
    std::memcpy(&w, material.data() + i, std::min<std::size_t>(8, material.size() - i));
    h ^= w + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    h ^= h >> 30;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 27;
    h *= 0x94d049bb133111ebull;
    h ^= h >> 31;
  }
  k.lo = h;
  return k;
}

std::string CacheKey::hex() const {
  char buf[33];
  std::snprintf(buf, sizeof(buf), "%016llx%016llx", static_cast<unsigned long long>(hi),
                static_cast<unsigned long long>(lo));
  return buf;
}

std::string DiskCache::path_of(const CacheKey& key) const { return dir_ + "/" + key.hex() + ".wjit"; }

bool DiskCache::load(const CacheKey& key, std::vector<char>& payload) const {
  if (!enabled()) return false;
  std::FILE* f = std::fopen(path_of(key).c_str(), "rb");
  if (f == nullptr) return false;
  char head[kHeaderBytes];
  bool ok = std::fread(head, 1, kHeaderBytes, f) == kHeaderBytes && std::memcmp(head, kMagic, 8) == 0 &&
            get_u64(head + 8) == key.hi && get_u64(head + 16) == key.lo;
  const uint64_t size = ok ? get_u64(head + 24) : 0;
  ok = ok && size > 0 && size < (uint64_t(1) << 32);
  if (ok) {
    std::vector<char> data(size);
    ok = std::fread(data.data(), 1, size, f) == size && std::fgetc(f) == EOF &&  // exact length
         fnv1a64(data.data(), data.size()) == get_u64(head + 32);
    if (ok) payload.swap(data);
  }
  std::fclose(f);
  return ok;
}

bool DiskCache::store(const CacheKey& key, const std::vector<char>& payload) const {
  if (!enabled() || payload.empty()) return false;
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);  // no-op when it exists; failures show at open()
  // A name no other writer uses: process id and a per-process counter.
  static std::atomic<uint64_t> counter{0};
  const std::string tmp = dir_ + "/." + key.hex() + "." + std::to_string(::getpid()) + "." +
                          std::to_string(counter.fetch_add(1)) + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  char head[kHeaderBytes];
  std::memcpy(head, kMagic, 8);
  put_u64(head + 8, key.hi);
  put_u64(head + 16, key.lo);
  put_u64(head + 24, payload.size());
  put_u64(head + 32, fnv1a64(payload.data(), payload.size()));
  bool ok = write_all(fd, head, kHeaderBytes) && write_all(fd, payload.data(), payload.size());
  ok = ::close(fd) == 0 && ok;
  if (ok) ok = std::rename(tmp.c_str(), path_of(key).c_str()) == 0;
  if (!ok) ::unlink(tmp.c_str());
  return ok;
}

}  // namespace weft::jit_detail
