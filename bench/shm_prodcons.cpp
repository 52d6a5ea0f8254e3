// /dev/shm producer-consumer, the way a DataLoader worker hands a batch to the
// main process: per message the producer creates a fresh segment in /dev/shm
// (shm_open + ftruncate + mmap), fills it (page faults allocate tmpfs pages),
// unmaps it and sends its number over a pipe; the consumer opens and maps it,
// reads every page, unlinks it and acks over a second pipe. ITERATIONS
// messages of 256 KiB.
#include <sys/mman.h>
#include <sys/wait.h>

#include <cstring>

#include "bench_common.h"

namespace {

constexpr size_t kSize = 256 * 1024;

std::string segment_name(pid_t owner, long i) {
  return "/hangtrace-bench-" + std::to_string(owner) + "-" + std::to_string(i);
}

void consumer(pid_t owner, int in, int out) {
  long i;
  while (read(in, &i, sizeof i) == sizeof i) {
    std::string name = segment_name(owner, i);
    int fd = shm_open(name.c_str(), O_RDONLY, 0);
    if (fd < 0) _exit(1);
    auto* p = static_cast<volatile unsigned char*>(mmap(nullptr, kSize, PROT_READ, MAP_SHARED, fd, 0));
    if (p == MAP_FAILED) _exit(1);
    unsigned sum = 0;
    for (size_t off = 0; off < kSize; off += 4096) sum += p[off];
    munmap(const_cast<unsigned char*>(p), kSize);
    close(fd);
    shm_unlink(name.c_str());
    if (write(out, &sum, sizeof sum) != sizeof sum) _exit(1);
  }
  _exit(0);
}

}  // namespace

int main(int argc, char** argv) {
  bench::Args args = bench::parse(argc, argv);
  int to_consumer[2], to_producer[2];
  if (pipe(to_consumer) != 0 || pipe(to_producer) != 0) bench::die("create pipes");
  bench::wait_gate(args);
  pid_t owner = getpid();
  long long t0 = bench::now_ns();
  pid_t child = fork();
  if (child < 0) bench::die("fork");
  if (child == 0) {
    close(to_consumer[1]);
    consumer(owner, to_consumer[0], to_producer[1]);
  }
  close(to_consumer[0]);
  for (long i = 0; i < args.iterations; ++i) {
    std::string name = segment_name(owner, i);
    int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0) bench::die("create a segment");
    if (ftruncate(fd, kSize) != 0) bench::die("size a segment");
    void* p = mmap(nullptr, kSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) bench::die("map a segment");
    std::memset(p, static_cast<int>(i), kSize);
    munmap(p, kSize);
    close(fd);
    unsigned sum;
    if (write(to_consumer[1], &i, sizeof i) != sizeof i ||
        read(to_producer[0], &sum, sizeof sum) != sizeof sum)
      bench::die("hand over a segment");
  }
  close(to_consumer[1]);
  int status = 0;
  if (waitpid(child, &status, 0) != child || status != 0) bench::die("reap the consumer");
  bench::report(args, bench::now_ns() - t0);
  return 0;
}
