#include <weft/weft.h>

#include <cstdio>

int main() {
  // Validation runs on the host: a bad page table is rejected without touching a GPU.
  int32_t indptr[] = {0, 2, 1};
  try {
    weft::check::indptr(indptr, 2, "kv_indptr");
  } catch (const weft::Error& e) {
    std::printf("weft %s found; rejected as expected: %s\n", weft::version(), e.what());
    return e.argument() == "kv_indptr" ? 0 : 1;
  }
  return 1;
}
