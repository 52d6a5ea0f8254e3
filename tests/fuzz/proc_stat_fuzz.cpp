// /proc/PID/stat (parse_stat) and the other one-line numeric files read with
// it for each thread: statm, schedstat, io, cmdline, comm and the namespace
// link text (userspace/core/procfs/process_files.cpp). Seeds: those files of
// live processes on a Debian machine (tests/fuzz/README.md).
#include "fuzz_support.h"
#include "hangtrace/procfs.h"

using namespace hangtrace;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text = fuzz::as_text(data, size);
  if (auto s = procfs::parse_stat(text)) {
    fuzz::check(s->comm.size() <= size);
    (void)s->is_kernel_thread();
  }
  (void)procfs::parse_statm(text);
  (void)procfs::parse_schedstat(text);
  (void)procfs::parse_schedstat_fields(text);
  (void)procfs::parse_io(text);
  (void)procfs::parse_namespace_link(text);
  fuzz::check(procfs::parse_cmdline(text).size() <= size);
  fuzz::check(procfs::parse_comm(text).size() <= size);
  return 0;
}
