// The kernel log's lines about dead and stalled processes (kernel_log.h).
#include "hangtrace/kernel_log.h"

#include <charconv>
#include <deque>

namespace hangtrace {

namespace {

template <typename T>
std::optional<T> number(std::string_view s) {
  T v{};
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

// The decimal number at the start of `s`, and how many characters it took.
std::optional<int> leading_int(std::string_view s, size_t* used = nullptr) {
  size_t n = 0;
  while (n < s.size() && n < 9 && s[n] >= '0' && s[n] <= '9') ++n;
  if (used) *used = n;
  return n ? number<int>(s.substr(0, n)) : std::nullopt;
}

// "key=value" in a comma-separated list ("oom-kill:constraint=...,task=x,pid=1").
std::string_view field(std::string_view list, std::string_view key) {
  size_t at = 0;
  while (at < list.size()) {
    size_t end = list.find(',', at);
    if (end == std::string_view::npos) end = list.size();
    std::string_view item = list.substr(at, end - at);
    if (item.size() > key.size() && item.substr(0, key.size()) == key && item[key.size()] == '=')
      return item.substr(key.size() + 1);
    at = end + 1;
  }
  return {};
}

// "COMM[PID]" ending at `close` (the index of ']'): the comm is the word
// before '[' (a comm may hold spaces: the text between the prefix and '[').
bool comm_and_pid(std::string_view text, size_t open, std::string& comm, int& pid) {
  size_t close = text.find(']', open);
  if (close == std::string_view::npos) return false;
  auto p = number<int>(text.substr(open + 1, close - open - 1));
  if (!p || *p <= 0) return false;
  pid = *p;
  comm = std::string(text.substr(0, open));
  return true;
}

// "COMM:PID" (hung task, memory failure): the last ':' before the number.
bool comm_colon_pid(std::string_view text, std::string& comm, int& pid) {
  size_t colon = text.rfind(':');
  if (colon == std::string_view::npos) return false;
  size_t used = 0;
  auto p = leading_int(text.substr(colon + 1), &used);
  if (!p || *p <= 0 || colon + 1 + used != text.size()) return false;
  pid = *p;
  comm = std::string(text.substr(0, colon));
  return true;
}

bool starts(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }

}  // namespace

const char* kernel_log_event_name(KernelLogEvent::Kind kind) {
  switch (kind) {
    case KernelLogEvent::Kind::OomKill:
      return "oom-kill";
    case KernelLogEvent::Kind::Segfault:
      return "segfault";
    case KernelLogEvent::Kind::Trap:
      return "trap";
    case KernelLogEvent::Kind::HungTask:
      return "hung-task";
    case KernelLogEvent::Kind::MemoryFailure:
      return "memory-failure";
    case KernelLogEvent::Kind::GpuXid:
      return "gpu-xid";
  }
  return "?";
}

std::optional<KernelLogEvent::Kind> kernel_log_event_kind(std::string_view name) {
  using Kind = KernelLogEvent::Kind;
  for (int k = 0; k <= static_cast<int>(Kind::GpuXid); ++k)
    if (name == kernel_log_event_name(static_cast<Kind>(k))) return static_cast<Kind>(k);
  return std::nullopt;
}

std::optional<KernelLogRecord> parse_kmsg_record(std::string_view raw) {
  const size_t semi = raw.find(';');
  if (semi == std::string_view::npos) return std::nullopt;
  std::string_view head = raw.substr(0, semi);
  uint64_t fields[3] = {0, 0, 0};
  for (int i = 0; i < 3; ++i) {
    size_t comma = head.find(',');
    std::string_view part = head.substr(0, comma);
    auto v = number<uint64_t>(part);
    if (!v) return std::nullopt;
    fields[i] = *v;
    if (comma == std::string_view::npos) {
      if (i < 2) return std::nullopt;
      break;
    }
    head = head.substr(comma + 1);
  }
  KernelLogRecord r;
  r.level = static_cast<int>(fields[0] & 7);
  r.seq = fields[1];
  r.ts_us = fields[2];
  std::string_view message = raw.substr(semi + 1);
  message = message.substr(0, message.find('\n'));  // continuation lines follow
  if (message.size() > kMaxKernelLogMessage) message = message.substr(0, kMaxKernelLogMessage);
  r.message = std::string(message);
  return r;
}

std::vector<KernelLogEvent> kernel_log_events(const std::vector<KernelLogRecord>& records) {
  std::deque<KernelLogEvent> out;
  auto add = [&](KernelLogEvent e) {
    out.push_back(std::move(e));
    if (out.size() > kMaxKernelLogEvents) out.pop_front();
  };
  std::optional<uint64_t> limit;  // from the last "memory: usage ..., limit ..." line
  bool oom_open = false;          // out.back() is an oom-kill line's event, until its "Killed process" line
  for (const auto& r : records) {
    std::string_view m = r.message;
    KernelLogEvent e;
    e.ts_us = r.ts_us;
    e.message = r.message;
    if (starts(m, "memory: usage ")) {
      size_t at = m.find("limit ");
      size_t used = 0;
      if (at != std::string_view::npos) {
        std::string_view rest = m.substr(at + 6);
        while (used < rest.size() && rest[used] >= '0' && rest[used] <= '9') ++used;
        if (auto kb = number<uint64_t>(rest.substr(0, used)); kb && rest.substr(used, 2) == "kB")
          limit = *kb << 10;
      }
      continue;
    }
    if (starts(m, "oom-kill:")) {
      std::string_view list = m.substr(9);
      auto pid = number<int>(field(list, "pid"));
      if (!pid) continue;
      e.kind = KernelLogEvent::Kind::OomKill;
      e.pid = *pid;
      e.comm = std::string(field(list, "task"));
      e.memcg = std::string(field(list, "task_memcg"));
      e.oom_memcg = std::string(field(list, "oom_memcg"));
      e.limit_bytes = limit;
      limit.reset();
      add(std::move(e));
      oom_open = true;
      continue;
    }
    // "Out of memory: Killed process 12 (x) ..." / "Memory cgroup out of
    // memory: Killed process 12 (x) ...": the kill the oom-kill line began.
    if (size_t at = m.find("Killed process "); at != std::string_view::npos) {
      std::string_view rest = m.substr(at + 15);
      size_t used = 0;
      auto pid = leading_int(rest, &used);
      if (!pid) continue;
      if (oom_open && !out.empty() && out.back().pid == *pid) {
        out.back().message += "; " + r.message;
        oom_open = false;
        continue;
      }
      e.kind = KernelLogEvent::Kind::OomKill;
      e.pid = *pid;
      size_t open = rest.find('('), close = rest.find(')');
      if (open != std::string_view::npos && close != std::string_view::npos && close > open)
        e.comm = std::string(rest.substr(open + 1, close - open - 1));
      e.limit_bytes = limit;
      limit.reset();
      add(std::move(e));
      oom_open = false;
      continue;
    }
    if (size_t at = m.find("]: segfault at "); at != std::string_view::npos) {
      size_t open = m.rfind('[', at);
      if (open != std::string_view::npos && comm_and_pid(m, open, e.comm, e.pid)) {
        e.kind = KernelLogEvent::Kind::Segfault;
        add(std::move(e));
      }
      continue;
    }
    if (starts(m, "traps: ")) {
      std::string_view rest = m.substr(7);
      size_t open = rest.find('[');
      if (open != std::string_view::npos && comm_and_pid(rest, open, e.comm, e.pid)) {
        e.kind = KernelLogEvent::Kind::Trap;
        add(std::move(e));
      }
      continue;
    }
    if (starts(m, "INFO: task ")) {
      std::string_view rest = m.substr(11);
      size_t end = rest.find(" blocked for more than");
      if (end != std::string_view::npos && comm_colon_pid(rest.substr(0, end), e.comm, e.pid)) {
        e.kind = KernelLogEvent::Kind::HungTask;
        add(std::move(e));
      }
      continue;
    }
    // "Memory failure: 0x1234: Sending SIGBUS to python3:812 due to ..." and
    // "MCE: Killing python3:812 due to hardware memory corruption ...".
    if (starts(m, "Memory failure: ") || starts(m, "MCE: Killing ")) {
      size_t to = m.find(" to ");
      size_t kill = m.find("Killing ");
      size_t from = to != std::string_view::npos && starts(m, "Memory failure: ") ? to + 4
                    : kill != std::string_view::npos                              ? kill + 8
                                                                                  : std::string_view::npos;
      size_t due = m.find(" due to", from == std::string_view::npos ? 0 : from);
      if (from != std::string_view::npos && due != std::string_view::npos &&
          comm_colon_pid(m.substr(from, due - from), e.comm, e.pid)) {
        e.kind = KernelLogEvent::Kind::MemoryFailure;
        add(std::move(e));
      }
      continue;
    }
    // "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python3, GPU has fallen off the bus."
    if (size_t at = m.find("NVRM: Xid ("); at != std::string_view::npos) {
      size_t colon = m.find("): ", at);
      if (colon == std::string_view::npos) continue;
      std::string_view rest = m.substr(colon + 3);
      size_t used = 0;
      auto xid = leading_int(rest, &used);
      if (!xid) continue;
      e.kind = KernelLogEvent::Kind::GpuXid;
      e.xid = *xid;
      if (size_t p = rest.find("pid="); p != std::string_view::npos)
        e.pid = leading_int(rest.substr(p + 4)).value_or(0);
      if (size_t n = rest.find("name="); n != std::string_view::npos) {
        std::string_view name = rest.substr(n + 5);
        e.comm = std::string(name.substr(0, name.find(',')));
      }
      add(std::move(e));
      continue;
    }
  }
  return {out.begin(), out.end()};
}

}  // namespace hangtrace
