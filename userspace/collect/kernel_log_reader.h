// /dev/kmsg read without blocking: every record the kernel's ring holds now.
#pragma once

#include <string>
#include <vector>

#include "hangtrace/kernel_log.h"

namespace hangtrace {

struct KernelLogRead {
  std::vector<KernelLogRecord> records;  // oldest first
  std::string error;                     // "failed to read /dev/kmsg: <reason>"; records read before it stay
  bool cut = false;                      // more than max_records: the oldest were dropped
};

// The records of `path` (a /dev/kmsg), at most `max_records` (the newest),
// reading at most twice that many before it stops: a kernel that logs
// without pause cannot keep the reader here.
KernelLogRead read_kernel_log(const std::string& path = "/dev/kmsg", size_t max_records = 20000);

}  // namespace hangtrace
