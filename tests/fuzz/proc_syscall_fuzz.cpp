// /proc/PID/task/TID/syscall (parse_syscall): "running", "-1 SP PC" or
// "NR A0..A5 SP PC" in hex. Seeds: syscall files of threads blocked in
// futex, epoll_wait, read, nanosleep, and of a running one.
#include "fuzz_support.h"
#include "hangtrace/procfs.h"

using namespace hangtrace;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  (void)procfs::parse_syscall(fuzz::as_text(data, size));
  return 0;
}
