// tmpfs page-fault loop: ITERATIONS times, create a fresh 4 MiB file in
// /dev/shm, map it shared, write one byte per page (1024 page faults that
// allocate tmpfs pages), unmap, unlink.
#include <sys/mman.h>

#include "bench_common.h"

int main(int argc, char** argv) {
  bench::Args args = bench::parse(argc, argv);
  constexpr size_t kSize = 4 << 20;
  std::string path = "/dev/shm/hangtrace-bench-faults-" + std::to_string(getpid());
  bench::wait_gate(args);
  long long t0 = bench::now_ns();
  for (long i = 0; i < args.iterations; ++i) {
    int fd = open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) bench::die("create the file");
    if (ftruncate(fd, kSize) != 0) bench::die("size the file");
    auto* p = static_cast<volatile char*>(mmap(nullptr, kSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
    if (p == MAP_FAILED) bench::die("map the file");
    for (size_t off = 0; off < kSize; off += 4096) p[off] = 1;
    munmap(const_cast<char*>(p), kSize);
    close(fd);
    unlink(path.c_str());
  }
  bench::report(args, bench::now_ns() - t0);
  return 0;
}
