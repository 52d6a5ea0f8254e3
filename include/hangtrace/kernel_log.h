// What the kernel's own log says of processes that died or stalled: OOM
// kills (victim, memory cgroup, limit), segfaults and traps, hung-task
// warnings, memory failures, NVIDIA Xid errors. Read from /dev/kmsg at each
// diagnosis (collect/kernel_log_reader.h), so a rank killed before hangtrace
// attached is still named. Pure parsing: unit-tested on log text.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hangtrace {

// One /dev/kmsg record: "PRIO,SEQ,TS_USEC,FLAGS[,...];MESSAGE\n" then
// continuation lines (" KEY=VALUE"), which are dropped.
struct KernelLogRecord {
  int level = 0;       // syslog level (PRIO & 7)
  uint64_t seq = 0;    // the record's sequence number
  uint64_t ts_us = 0;  // microseconds since boot (the kernel's local clock)
  std::string message;
};
// nullopt on a record that does not have that shape. The message is cut at
// kMaxKernelLogMessage bytes: the text is the kernel's, its length is not ours.
constexpr size_t kMaxKernelLogMessage = 1024;
std::optional<KernelLogRecord> parse_kmsg_record(std::string_view raw);

struct KernelLogEvent {
  enum class Kind { OomKill, Segfault, Trap, HungTask, MemoryFailure, GpuXid };  // GpuXid last
  Kind kind = Kind::OomKill;
  uint64_t ts_us = 0;  // of the record that names it
  int pid = 0;         // the victim, the faulting process, the hung task, the Xid's process; 0 when none
  std::string comm;
  // OOM kills: the memory cgroup the victim was in (task_memcg) and the one
  // whose limit was hit (oom_memcg), as the kernel prints them ("/job"); the
  // limit from the "memory: usage ..., limit ..." line before it, if any.
  std::string memcg, oom_memcg;
  std::optional<uint64_t> limit_bytes;
  int xid = 0;          // GpuXid: the Xid number
  std::string message;  // the record's text
};
const char* kernel_log_event_name(KernelLogEvent::Kind kind);
// The kind kernel_log_event_name gives `name`; nullopt for any other name.
std::optional<KernelLogEvent::Kind> kernel_log_event_kind(std::string_view name);

// The events in `records` (oldest first), each kill once though the kernel
// prints several lines about it. At most kMaxKernelLogEvents, the newest.
constexpr size_t kMaxKernelLogEvents = 256;
std::vector<KernelLogEvent> kernel_log_events(const std::vector<KernelLogRecord>& records);

}  // namespace hangtrace
