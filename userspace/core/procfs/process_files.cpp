// Parsers of one process's or thread's own files: stat, status, syscall, io,
// schedstat, statm, cmdline, comm, and the namespace links.
#include <algorithm>
#include <fmt/format.h>

#include "fields.h"
#include "hangtrace/procfs.h"

namespace hangtrace::procfs {

using namespace fields;

// ---- stat -------------------------------------------------------------------

Result<ProcStat> parse_stat(std::string_view text) {
  // The comm may hold spaces, parentheses and even newlines, so it is cut
  // between the first '(' and the LAST ')'; everything after is fields.
  size_t open = text.find('(');
  size_t close = text.rfind(')');
  if (open == std::string_view::npos || close == std::string_view::npos || close < open)
    return parse_error("stat", fmt::format("no (comm) in '{}'", excerpt(text)));
  ProcStat st;
  auto pid = parse_int<int>(trim(text.substr(0, open)));
  if (!pid) return parse_error("stat", fmt::format("bad pid in '{}'", excerpt(text)));
  st.pid = *pid;
  st.comm = std::string(text.substr(open + 1, close - open - 1));
  auto fields = split_whitespace(text.substr(close + 1));
  // fields[i] is stat field i+3 (1-based, as proc(5) numbers them).
  auto field = [&](int number) -> std::string_view {
    size_t index = static_cast<size_t>(number - 3);
    return index < fields.size() ? fields[index] : std::string_view{};
  };
  constexpr int kStartTimeField = 22;
  if (fields.size() < static_cast<size_t>(kStartTimeField - 2))
    return parse_error("stat", fmt::format("only {} fields after the comm", fields.size()));
  if (field(3).size() != 1) return parse_error("stat", fmt::format("bad state '{}'", field(3)));
  st.state = field(3)[0];
  auto ppid = parse_int<int>(field(4));
  auto pgrp = parse_int<int>(field(5));
  auto session = parse_int<int>(field(6));
  auto flags = parse_int<uint32_t>(field(9));
  auto utime = parse_u64(field(14));
  auto stime = parse_u64(field(15));
  auto threads = parse_int<int>(field(20));
  auto start = parse_u64(field(kStartTimeField));
  if (!ppid || !pgrp || !session || !flags || !utime || !stime || !threads || !start)
    return parse_error("stat", fmt::format("a numeric field does not parse in '{}'", excerpt(text)));
  st.ppid = *ppid;
  st.pgrp = *pgrp;
  st.session = *session;
  st.flags = *flags;
  st.utime_ticks = *utime;
  st.stime_ticks = *stime;
  st.num_threads = *threads;
  st.start_time_ticks = *start;
  if (auto v = parse_u64(field(28))) st.start_stack = *v;
  if (auto v = parse_u64(field(48))) st.arg_start = *v;
  if (auto v = parse_u64(field(49))) st.arg_end = *v;
  if (auto sig = parse_int<int>(field(38))) st.exit_signal = *sig;
  if (auto code = parse_int<int>(field(52))) st.exit_code = *code;
  return st;
}

// ---- status -----------------------------------------------------------------

Result<ProcStatus> parse_status(std::string_view text) {
  ProcStatus st;
  bool have_name = false, have_tgid = false, have_ppid = false;
  for (auto line : split_lines(text)) {
    std::string_view key, value;
    // Name may contain ':' itself, so the key is cut at the FIRST colon.
    if (!split_key_value(line, key, value)) continue;
    if (key == "Name") {
      st.name = std::string(value);
      have_name = true;
    } else if (key == "State") {
      if (!value.empty()) st.state = value[0];
    } else if (key == "Tgid") {
      auto v = parse_int<int>(value);
      if (!v) return parse_error("status", fmt::format("bad Tgid '{}'", value));
      st.tgid = *v;
      have_tgid = true;
    } else if (key == "Pid") {
      if (auto v = parse_int<int>(value)) st.pid = *v;
    } else if (key == "PPid") {
      auto v = parse_int<int>(value);
      if (!v) return parse_error("status", fmt::format("bad PPid '{}'", value));
      st.ppid = *v;
      have_ppid = true;
    } else if (key == "NSpid") {
      for (std::string_view rest = value; !rest.empty() && st.ns_pids.size() < kMaxPidNamespaceDepth;) {
        size_t start = rest.find_first_not_of(" \t");
        if (start == std::string_view::npos) break;
        rest = rest.substr(start);
        size_t end = rest.find_first_of(" \t");
        auto v = parse_int<int>(rest.substr(0, end));
        if (!v) return parse_error("status", fmt::format("bad NSpid '{}'", value));
        st.ns_pids.push_back(*v);
        rest = end == std::string_view::npos ? std::string_view() : rest.substr(end);
      }
    } else if (key == "TracerPid") {
      if (auto v = parse_int<int>(value)) st.tracer_pid = *v;
    } else if (key == "SigCgt") {
      if (auto v = parse_u64(value, 16)) st.signals_caught = *v;
    } else if (key == "SigBlk") {
      if (auto v = parse_u64(value, 16)) st.signals_blocked = *v;
    } else if (key == "Threads") {
      if (auto v = parse_int<int>(value)) st.threads = *v;
    } else if (key == "voluntary_ctxt_switches") {
      auto v = parse_u64(value);
      if (!v) return parse_error("status", fmt::format("bad voluntary_ctxt_switches '{}'", value));
      st.voluntary_ctxt_switches = *v;
    } else if (key == "nonvoluntary_ctxt_switches") {
      auto v = parse_u64(value);
      if (!v) return parse_error("status", fmt::format("bad nonvoluntary_ctxt_switches '{}'", value));
      st.nonvoluntary_ctxt_switches = *v;
    }
  }
  if (!have_name || !have_tgid || !have_ppid) return parse_error("status", "missing Name, Tgid or PPid");
  return st;
}

// ---- syscall ------------------------------------------------------------------

Result<SyscallState> parse_syscall(std::string_view text) {
  SyscallState sc;
  std::string_view t = trim(text);
  if (t == "running") {
    sc.mode = SyscallState::Mode::Running;
    return sc;
  }
  auto tokens = split_whitespace(t);
  if (tokens.empty()) return parse_error("syscall", "empty");
  auto nr = parse_int<int64_t>(tokens[0]);
  if (!nr) return parse_error("syscall", fmt::format("bad syscall number in '{}'", excerpt(t)));
  if (*nr < 0) {
    // Blocked (or stopped) in user mode: only the user stack and pc.
    if (tokens.size() != 3)
      return parse_error("syscall", fmt::format("expected '-1 SP PC', got '{}'", excerpt(t)));
    auto sp = parse_u64(tokens[1], 16), pc = parse_u64(tokens[2], 16);
    if (!sp || !pc) return parse_error("syscall", fmt::format("bad sp/pc in '{}'", excerpt(t)));
    sc.mode = SyscallState::Mode::User;
    sc.nr = -1;
    sc.sp = *sp;
    sc.pc = *pc;
    return sc;
  }
  if (tokens.size() != 9)
    return parse_error("syscall", fmt::format("expected 'NR A0..A5 SP PC', got '{}'", excerpt(t)));
  for (size_t i = 0; i < 8; ++i) {
    auto v = parse_u64(tokens[i + 1], 16);
    if (!v) return parse_error("syscall", fmt::format("bad hex '{}'", tokens[i + 1]));
    if (i < 6)
      sc.args[i] = *v;
    else if (i == 6)
      sc.sp = *v;
    else
      sc.pc = *v;
  }
  sc.mode = SyscallState::Mode::InSyscall;
  sc.nr = *nr;
  return sc;
}

// ---- io, schedstat, cmdline, namespaces ---------------------------------------

Result<ProcIo> parse_io(std::string_view text) {
  ProcIo io;
  bool have_rchar = false, have_wchar = false;
  for (auto line : split_lines(text)) {
    std::string_view key, value;
    if (!split_key_value(line, key, value)) continue;
    uint64_t* slot = nullptr;
    if (key == "rchar")
      slot = &io.rchar, have_rchar = true;
    else if (key == "wchar")
      slot = &io.wchar, have_wchar = true;
    else if (key == "syscr")
      slot = &io.syscr;
    else if (key == "syscw")
      slot = &io.syscw;
    else if (key == "read_bytes")
      slot = &io.read_bytes;
    else if (key == "write_bytes")
      slot = &io.write_bytes;
    if (!slot) continue;
    auto v = parse_u64(value);
    if (!v) return parse_error("io", fmt::format("bad {} '{}'", key, value));
    *slot = *v;
  }
  if (!have_rchar || !have_wchar) return parse_error("io", "missing rchar or wchar");
  return io;
}

Result<Schedstat> parse_schedstat_fields(std::string_view text) {
  auto tokens = split_whitespace(text);
  // "run_ns wait_ns timeslices"; a line with fewer is truncated.
  if (tokens.size() < 3) return parse_error("schedstat", fmt::format("'{}'", excerpt(text)));
  auto run = parse_u64(tokens[0]), delay = parse_u64(tokens[1]), slices = parse_u64(tokens[2]);
  if (!run) return parse_error("schedstat", fmt::format("bad run time '{}'", tokens[0]));
  if (!delay || !slices) return parse_error("schedstat", fmt::format("'{}'", excerpt(text)));
  return Schedstat{*run, *delay, *slices};
}

Result<uint64_t> parse_schedstat(std::string_view text) {
  auto s = parse_schedstat_fields(text);
  if (!s) return make_error(s.error());
  return s->run_ns;
}

std::string parse_cmdline(std::string_view text) {
  while (!text.empty() && text.back() == '\0') text.remove_suffix(1);
  std::string out(text);
  std::replace(out.begin(), out.end(), '\0', ' ');
  return out;
}

Result<uint64_t> parse_namespace_link(std::string_view link) {
  size_t open = link.find('['), close = link.rfind(']');
  if (open == std::string_view::npos || close == std::string_view::npos || close < open)
    return parse_error("namespace link", fmt::format("'{}'", excerpt(link)));
  auto v = parse_u64(link.substr(open + 1, close - open - 1));
  if (!v) return parse_error("namespace link", fmt::format("'{}'", excerpt(link)));
  return *v;
}

Result<ProcStatm> parse_statm(std::string_view text) {
  // "size resident shared text lib data dt", in pages.
  auto tokens = split_whitespace(text);
  if (tokens.size() < 2) return parse_error("statm", fmt::format("'{}'", excerpt(text)));
  auto size = parse_u64(tokens[0]), resident = parse_u64(tokens[1]);
  if (!size || !resident) return parse_error("statm", fmt::format("'{}'", excerpt(text)));
  return ProcStatm{*size, *resident};
}

std::string parse_comm(std::string_view text) {
  if (!text.empty() && text.back() == '\n') text.remove_suffix(1);
  return std::string(text);
}

}  // namespace hangtrace::procfs
