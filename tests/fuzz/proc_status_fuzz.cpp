// /proc/PID/status and /proc/PID/task/TID/status (parse_status,
// userspace/core/procfs/process_files.cpp): Name, State, Tgid, PPid, NSpid,
// TracerPid, context switches. Seeds: status of live processes and threads.
#include "fuzz_support.h"
#include "hangtrace/procfs.h"

using namespace hangtrace;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto s = procfs::parse_status(fuzz::as_text(data, size));
  if (!s) return 0;
  fuzz::check(s->name.size() <= size);
  fuzz::check(s->ns_pids.size() <= procfs::kMaxPidNamespaceDepth);
  return 0;
}
