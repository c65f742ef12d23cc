// Internal: the on-disk cache of compiled JIT images (weft::jit::Options::cache_dir).
//
// One file per key, <dir>/<32 hex digits>.wjit:
//   bytes 0..7    magic "WEFTJIT1"
//   bytes 8..23   the key (16 bytes, the hash of everything the image depends on)
//   bytes 24..31  payload size (little-endian uint64)
//   bytes 32..39  FNV-1a 64 checksum of the payload
//   then the payload (the CUBIN).
// A file whose magic, key, size or checksum does not match is ignored (a miss), so partial,
// truncated or foreign files never load; the next store replaces it. Stores write a temporary
// file in the same directory (unique per process and call) and rename() it into place: rename is
// atomic within a file system, so readers see the old file, no file, or the whole new file, and
// concurrent writers of the same key both leave a complete image (the last rename wins).
// Host only, pure C++ (POSIX); no CUDA.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace weft::jit_detail {

// 128-bit key of a byte string: two independent 64-bit hashes (FNV-1a, and a multiply-xorshift
// mix with another seed). Not cryptographic: a cache key, collisions between honest inputs are
// negligible (and a hit is still checked against the stored key).
struct CacheKey {
  uint64_t hi = 0, lo = 0;
  std::string hex() const;  // 32 lowercase hex digits
  bool operator==(const CacheKey& o) const { return hi == o.hi && lo == o.lo; }
};
CacheKey make_cache_key(const std::string& material);
uint64_t fnv1a64(const void* data, std::size_t n, uint64_t seed = 0xcbf29ce484222325ull);

class DiskCache {
 public:
  // dir empty: disabled (load misses, store does nothing). The directory (and its parents) is
  // created on the first store.
  explicit DiskCache(std::string dir) : dir_(std::move(dir)) {}
  bool enabled() const { return !dir_.empty(); }
  std::string path_of(const CacheKey& key) const;
  // The payload stored under key, or false (missing, unreadable, or failing any check).
  bool load(const CacheKey& key, std::vector<char>& payload) const;
  // Writes atomically (temporary file + rename). Returns false when the directory cannot be
  // written (the cache is best effort: compiling still succeeded).
  bool store(const CacheKey& key, const std::vector<char>& payload) const;

 private:
  std::string dir_;
};

}  // namespace weft::jit_detail
