#include "hangtrace/snapshot_json.h"

#include "hangtrace/json_values.h"
#include "kernel_log_json.h"

#include "hangtrace/text.h"

#include <fmt/format.h>

#include <limits>
#include <stdexcept>
#include <type_traits>

namespace hangtrace {

using nlohmann::json;

namespace {

// Native frames keep what offline symbolization needs (module path,
// build-id, offset in the module); keys at their defaults are left out so
// Python frames read as before.
json user_frame_to_json(const UserFrame& f) {
  json j = {{"function", f.function}, {"file", f.file}};
  if (f.kind == UserFrame::Kind::Native) {
    j["kind"] = "native";
    j["addr"] = f.addr;
    j["module_offset"] = f.module_offset;
    if (!f.build_id.empty()) j["build_id"] = f.build_id;
  } else {
    j["line"] = f.line;
  }
  if (f.python_entry) j["python_entry"] = true;
  if (f.argument) j["argument"] = *f.argument;
  return j;
}

using json_values::as;
using json_values::get_if;
using json_values::get_opt;
using json_values::nullable;

template <class T>
T value_or(const json& j, const char* key, T fallback) {
  auto it = j.find(key);
  return it == j.end() || it->is_null() ? fallback : as<T>(*it);
}

UserFrame user_frame_from_json(const json& j, UserFrame::Kind default_kind) {
  UserFrame f;
  f.kind = default_kind;
  if (auto it = j.find("kind"); it != j.end() && it->is_string())
    f.kind = it->get<std::string>() == "native" ? UserFrame::Kind::Native : UserFrame::Kind::Python;
  auto str = [&](const char* key, std::string& out) {
    if (auto it = j.find(key); it != j.end() && it->is_string()) out = it->get<std::string>();
  };
  auto num = [&](const char* key, auto& out) {
    if (auto it = j.find(key); it != j.end() && it->is_number()) out = as<std::decay_t<decltype(out)>>(*it);
  };
  str("function", f.function);
  str("file", f.file);
  str("build_id", f.build_id);
  num("line", f.line);
  num("addr", f.addr);
  num("module_offset", f.module_offset);
  if (auto it = j.find("python_entry"); it != j.end() && it->is_boolean()) f.python_entry = it->get<bool>();
  if (auto it = j.find("argument"); it != j.end() && it->is_number_integer()) f.argument = as<int64_t>(*it);
  return f;
}

const char* fd_kind_name(FdKind k) {
  switch (k) {
    case FdKind::Unknown:
      return "unknown";
    case FdKind::Pipe:
      return "pipe";
    case FdKind::Socket:
      return "socket";
    case FdKind::EventFd:
      return "eventfd";
    case FdKind::Epoll:
      return "epoll";
    case FdKind::TimerFd:
      return "timerfd";
    case FdKind::SignalFd:
      return "signalfd";
    case FdKind::PidFd:
      return "pidfd";
    case FdKind::OtherAnon:
      return "anon";
    case FdKind::File:
      return "file";
    case FdKind::ShmFile:
      return "shm";
    case FdKind::Device:
      return "device";
  }
  return "unknown";
}

FdKind fd_kind_from(const std::string& s) {
  for (FdKind k :
       {FdKind::Pipe, FdKind::Socket, FdKind::EventFd, FdKind::Epoll, FdKind::TimerFd, FdKind::SignalFd,
        FdKind::PidFd, FdKind::OtherAnon, FdKind::File, FdKind::ShmFile, FdKind::Device})
    if (s == fd_kind_name(k)) return k;
  return FdKind::Unknown;
}

const char* mode_name(SyscallState::Mode m) {
  switch (m) {
    case SyscallState::Mode::Unknown:
      return "unknown";
    case SyscallState::Mode::Running:
      return "running";
    case SyscallState::Mode::InSyscall:
      return "syscall";
    case SyscallState::Mode::User:
      return "user";
  }
  return "unknown";
}

SyscallState::Mode mode_from(const std::string& s) {
  if (s == "running") return SyscallState::Mode::Running;
  if (s == "syscall") return SyscallState::Mode::InSyscall;
  if (s == "user") return SyscallState::Mode::User;
  return SyscallState::Mode::Unknown;
}

// "dev": [major, minor] of a mapping or a mount.
void get_device(const json& j, uint32_t& major, uint32_t& minor) {
  if (!j.contains("dev")) return;
  auto dev = as<std::vector<uint32_t>>(j.at("dev"));
  if (dev.size() == 2) major = dev[0], minor = dev[1];
}

json file_lock_to_json(const FileLock& l) {
  return {{"id", l.id},
          {"type", l.type},
          {"mode", l.mode},
          {"pid", l.pid},
          {"dev", {l.dev_major, l.dev_minor}},
          {"inode", l.inode},
          {"start", l.start},
          {"end", nullable(l.end)},
          {"waiting", l.waiting}};
}

json file_locks_to_json(const std::vector<FileLock>& locks) {
  json out = json::array();
  for (const auto& l : locks) out.push_back(file_lock_to_json(l));
  return out;
}

std::vector<FileLock> file_locks_from_json(const json& j, const char* key) {
  std::vector<FileLock> out;
  for (const auto& jl : j.value(key, json::array())) {
    if (!jl.is_object()) continue;
    FileLock l;
    get_if(jl, "id", l.id);
    get_if(jl, "type", l.type);
    get_if(jl, "mode", l.mode);
    get_if(jl, "pid", l.pid);
    get_device(jl, l.dev_major, l.dev_minor);
    get_if(jl, "inode", l.inode);
    get_if(jl, "start", l.start);
    get_opt(jl, "end", l.end);
    get_if(jl, "waiting", l.waiting);
    out.push_back(std::move(l));
  }
  return out;
}

char state_char(const json& j, const char* key) {
  std::string s = j.value(key, std::string("?"));
  return s.empty() ? '?' : s[0];
}

}  // namespace

json snapshot_to_json(const Snapshot& s) {
  json j;
  j["schema"] = kSnapshotSchema;
  j["hangtrace_version"] = s.hangtrace_version;
  j["hostname"] = s.hostname;
  j["kernel_release"] = s.kernel_release;
  j["taken_at_unix"] = s.taken_at_unix;
  j["sample_window_s"] = s.sample_window_s;
  j["sampled_at_unix"] = s.sampled_at_unix;
  j["sampled_at_monotonic_ns"] = s.sampled_at_monotonic_ns;
  j["target_pid"] = s.target_pid;
  j["given_pids"] = s.given_pids;
  j["root_parent"] = s.root_parent;
  j["local_addresses"] = s.local_addresses;
  j["limitations"] = s.limitations;
  if (s.kernel_log_read_at_s > 0) j["kernel_log"] = kernel_log_to_json(s);
  json procs = json::array();
  for (const auto& p : s.processes) {
    json jp = {{"pid", p.pid},
               {"ppid", p.ppid},
               {"comm", p.comm},
               {"cmdline", p.cmdline},
               {"exe", p.exe},
               {"state", std::string(1, p.state)},
               {"flags", p.flags},
               {"role", role_name(p.role)},
               {"is_python", p.is_python},
               {"netns", p.netns},
               {"mntns", p.mntns},
               {"children", p.children},
               {"exit_signal", nullable(p.exit_signal)}};
    // Only for processes of a distributed job: absent, not null, elsewhere.
    if (p.rank) jp["rank"] = *p.rank;
    if (p.world_size) jp["world_size"] = *p.world_size;
    if (p.local_rank) jp["local_rank"] = *p.local_rank;
    if (!p.rank_source.empty()) jp["rank_source"] = p.rank_source;
    if (p.age_s) jp["age_s"] = *p.age_s;
    if (!p.job_id.empty()) {
      jp["job_id"] = p.job_id;
      jp["job_id_source"] = p.job_id_source;
    }
    if (!p.ns_pids.empty()) jp["ns_pids"] = p.ns_pids;
    if (p.signals_caught) jp["signals_caught"] = *p.signals_caught;
    if (p.main_signals_blocked) jp["main_signals_blocked"] = *p.main_signals_blocked;
    if (!p.python_gils.empty()) jp["python_gils"] = p.python_gils;
    if (!p.python_interpreter.empty()) jp["python_interpreter"] = p.python_interpreter;
    if (!p.container_id.empty() || !p.pod_uid.empty())
      jp["container"] = {{"runtime", p.container_runtime}, {"id", p.container_id}, {"pod_uid", p.pod_uid}};
    if (!p.frozen_cgroup.empty()) jp["frozen_cgroup"] = p.frozen_cgroup;
    if (!p.memory_cgroup.empty()) jp["memory_cgroup"] = p.memory_cgroup;
    if (p.resolver)
      jp["resolver"] = {{"nameservers", p.resolver->nameservers},
                        {"timeout_s", nullable(p.resolver->timeout_s)},
                        {"attempts", nullable(p.resolver->attempts)},
                        {"error", p.resolver->error.empty() ? json(nullptr) : json(p.resolver->error)}};
    json threads = json::array();
    for (const auto& t : p.threads) {
      json jt = {{"tid", t.tid},
                 {"comm", t.comm},
                 {"state", std::string(1, t.state)},
                 {"syscall",
                  {{"mode", mode_name(t.syscall.mode)},
                   {"nr", t.syscall.nr},
                   {"args", std::vector<uint64_t>(t.syscall.args, t.syscall.args + 6)},
                   {"sp", t.syscall.sp},
                   {"pc", t.syscall.pc}}},
                 {"memory",
                  {{"futex_word", nullable(t.memory.futex_word)},
                   {"futex_bytes", t.memory.futex_bytes},
                   {"poll_fds", t.memory.poll_fds},
                   {"timeout_s", nullable(t.memory.timeout_s)},
                   {"timeout_absolute", t.memory.timeout_absolute}}},
                 {"ns_tid", t.ns_tid},
                 {"voluntary_switches", t.voluntary_switches},
                 {"tracer_pid", t.tracer_pid},
                 {"tracer_comm", t.tracer_comm},
                 {"involuntary_switches", t.involuntary_switches},
                 {"cpu_ns", {t.cpu_ns_start, t.cpu_ns_end}},
                 {"io_bytes", {t.io_bytes_start, t.io_bytes_end}},
                 {"progress_sampled", t.progress_sampled}};
      if (t.runs_at_read) jt["runs"] = {*t.runs_at_read, t.runs_end};
      if (t.poll)
        jt["poll"] = {{"watched_s", t.poll->watched_s}, {"sleeps", t.poll->sleeps},
                      {"cpu_ns", t.poll->cpu_ns},       {"samples", t.poll->samples},
                      {"asleep", t.poll->asleep},       {"lock_fds", t.poll->lock_fds}};
      if (t.kernel) {
        json stack = json::array();
        for (const auto& f : t.kernel->stack) stack.push_back({{"addr", f.addr}, {"symbol", f.symbol}});
        jt["kernel"] = {{"state", t.kernel->state},
                        {"task_flags", t.kernel->task_flags},
                        {"on_cpu", t.kernel->on_cpu},
                        {"off_cpu_ns", t.kernel->off_cpu_ns},
                        {"sum_exec_ns", t.kernel->sum_exec_ns},
                        {"nvcsw", t.kernel->nvcsw},
                        {"nivcsw", t.kernel->nivcsw},
                        {"user_ip", t.kernel->user_ip},
                        {"user_sp", t.kernel->user_sp},
                        {"user_bp", t.kernel->user_bp},
                        {"stack", stack},
                        {"stack_error", t.kernel->stack_error}};
      }
      // Python stacks: only where read (older readers ignore the keys).
      if (!t.python_stack.empty()) {
        json py = json::array();
        for (const auto& f : t.python_stack) py.push_back(user_frame_to_json(f));
        jt["python_stack"] = py;
      }
      if (!t.python_stack_error.empty()) jt["python_stack_error"] = t.python_stack_error;
      if (!t.native_stack.empty()) {
        json native = json::array();
        for (const auto& f : t.native_stack) native.push_back(user_frame_to_json(f));
        jt["native_stack"] = native;
      }
      if (!t.native_stack_error.empty()) jt["native_stack_error"] = t.native_stack_error;
      if (t.holds_gil) jt["holds_gil"] = true;
      if (t.python_lock)
        jt["python_lock"] = {{"mutex", t.python_lock->mutex},
                             {"kind", t.python_lock->kind},
                             {"object", t.python_lock->object},
                             {"object_type", t.python_lock->object_type},
                             {"owner_tid", t.python_lock->owner_tid}};
      if (t.asyncio_loop) jt["asyncio_loop"] = t.asyncio_loop;
      if (t.asyncio_running_task) jt["asyncio_running_task"] = t.asyncio_running_task;
      threads.push_back(jt);
    }
    jp["threads"] = threads;
    if (!p.asyncio_tasks.empty()) {
      json tasks = json::array();
      for (const auto& task : p.asyncio_tasks) {
        json coro = json::array();
        for (const auto& f : task.coroutine_stack) coro.push_back(user_frame_to_json(f));
        tasks.push_back({{"address", task.address},
                         {"name", task.name},
                         {"tid", task.tid},
                         {"coroutine_stack", coro},
                         {"awaits", task.awaits},
                         {"awaits_type", task.awaits_type},
                         {"awaits_refcount", task.awaits_refcount},
                         {"awaits_own_refs", task.awaits_own_refs},
                         {"awaited_by", task.awaited_by},
                         {"error", task.error}});
      }
      jp["asyncio_tasks"] = tasks;
    }
    if (!p.asyncio_error.empty()) jp["asyncio_error"] = p.asyncio_error;
    json fds = json::array();
    for (const auto& f : p.fds) {
      json epoll = json::array();
      for (const auto& e : f.epoll)
        epoll.push_back({{"fd", e.target_fd}, {"events", e.events}, {"inode", e.inode}});
      fds.push_back({{"fd", f.fd},
                     {"link", f.link},
                     {"kind", fd_kind_name(f.kind)},
                     {"inode", f.inode},
                     {"flags", f.flags},
                     {"pos", f.pos},
                     {"eventfd_id", nullable(f.eventfd_id)},
                     {"epoll", epoll},
                     {"ready_events", f.ready_events},
                     {"queued_bytes", f.queued_bytes}});
      if (f.mnt_id >= 0) fds.back()["mnt_id"] = f.mnt_id;
      if (f.dev_major || f.dev_minor) fds.back()["dev"] = {f.dev_major, f.dev_minor};
      if (!f.locks.empty()) fds.back()["locks"] = file_locks_to_json(f.locks);
      if (f.pidfd_pid) fds.back()["pidfd_pid"] = *f.pidfd_pid;
      if (f.signal_mask) fds.back()["signal_mask"] = *f.signal_mask;
    }
    jp["fds"] = fds;
    if (!p.mounts.empty()) {
      json mounts = json::array();
      for (const auto& m : p.mounts)
        mounts.push_back({{"mount_id", m.mount_id},
                          {"parent_id", m.parent_id},
                          {"dev", {m.dev_major, m.dev_minor}},
                          {"root", m.root},
                          {"mount_point", m.mount_point},
                          {"mount_options", m.mount_options},
                          {"fstype", m.fstype},
                          {"source", m.source},
                          {"super_options", m.super_options}});
      jp["mounts"] = mounts;
    }
    json maps = json::array();
    for (const auto& m : p.maps)
      maps.push_back({{"start", m.start},
                      {"end", m.end},
                      {"offset", m.offset},
                      {"perms", m.perms},
                      {"dev", {m.dev_major, m.dev_minor}},
                      {"inode", m.inode},
                      {"path", m.path}});
    jp["maps"] = maps;
    procs.push_back(jp);
  }
  j["processes"] = procs;
  json socks = json::array();
  for (const auto& k : s.sockets)
    socks.push_back({{"inode", k.inode},
                     {"netns", k.netns},
                     {"family", k.family},
                     {"state", k.state},
                     {"local", k.local},
                     {"remote", k.remote},
                     {"rx_queue", k.rx_queue},
                     {"tx_queue", k.tx_queue},
                     {"peer_inode", k.peer_inode},
                     {"pending_on_listener", k.pending_on_listener},
                     {"remote_is_local_host", k.remote_is_local_host}});
  j["sockets"] = socks;
  if (!s.file_locks.empty()) j["file_locks"] = file_locks_to_json(s.file_locks);
  json segs = json::array();
  for (const auto& g : s.shm.largest)
    segs.push_back({{"name", g.name},
                    {"size_bytes", g.size_bytes},
                    {"allocated_bytes", g.allocated_bytes},
                    {"mapped_by", g.mapped_by}});
  j["shm"] = {{"available", s.shm.available},
              {"mount_path", s.shm.mount_path},
              {"size_bytes", s.shm.size_bytes},
              {"used_bytes", s.shm.used_bytes},
              {"largest", segs},
              {"unlinked_mapped_bytes", s.shm.unlinked_mapped_bytes}};
  return j;
}

Result<Snapshot> snapshot_from_json(const json& j) {
  try {
    if (!j.is_object() || j.value("schema", std::string()) != kSnapshotSchema)
      return make_error(fmt::format("not a hangtrace snapshot (expected schema \"{}\")", kSnapshotSchema));
    Snapshot s;
    get_if(j, "hangtrace_version", s.hangtrace_version);
    get_if(j, "hostname", s.hostname);
    get_if(j, "kernel_release", s.kernel_release);
    get_if(j, "taken_at_unix", s.taken_at_unix);
    get_if(j, "sample_window_s", s.sample_window_s);
    // Absent in snapshots written before the clock pair was recorded.
    get_if(j, "sampled_at_unix", s.sampled_at_unix);
    get_if(j, "sampled_at_monotonic_ns", s.sampled_at_monotonic_ns);
    s.target_pid = as<int>(j.at("target_pid"));
    get_if(j, "given_pids", s.given_pids);
    get_if(j, "root_parent", s.root_parent);
    get_if(j, "local_addresses", s.local_addresses);
    get_if(j, "limitations", s.limitations);
    if (auto it = j.find("kernel_log"); it != j.end()) kernel_log_from_json(*it, s);
    for (const auto& jp : j.at("processes")) {
      ProcessInfo p;
      p.pid = as<int>(jp.at("pid"));
      get_if(jp, "ppid", p.ppid);
      get_if(jp, "comm", p.comm);
      get_if(jp, "cmdline", p.cmdline);
      get_if(jp, "exe", p.exe);
      p.state = state_char(jp, "state");
      get_if(jp, "flags", p.flags);
      p.role = role_from_name(jp.value("role", std::string("descendant")));
      get_if(jp, "is_python", p.is_python);
      get_if(jp, "python_gils", p.python_gils);
      get_if(jp, "python_interpreter", p.python_interpreter);
      get_if(jp, "netns", p.netns);
      get_if(jp, "mntns", p.mntns);
      get_if(jp, "children", p.children);
      get_opt(jp, "exit_signal", p.exit_signal);
      get_opt(jp, "rank", p.rank);
      get_opt(jp, "world_size", p.world_size);
      get_opt(jp, "local_rank", p.local_rank);
      get_if(jp, "rank_source", p.rank_source);
      get_opt(jp, "age_s", p.age_s);
      get_if(jp, "job_id", p.job_id);
      get_if(jp, "job_id_source", p.job_id_source);
      get_if(jp, "ns_pids", p.ns_pids);
      get_opt(jp, "signals_caught", p.signals_caught);
      get_opt(jp, "main_signals_blocked", p.main_signals_blocked);
      get_if(jp, "frozen_cgroup", p.frozen_cgroup);
      get_if(jp, "memory_cgroup", p.memory_cgroup);
      if (jp.contains("container") && jp.at("container").is_object()) {
        const json& c = jp.at("container");
        get_if(c, "runtime", p.container_runtime);
        get_if(c, "id", p.container_id);
        get_if(c, "pod_uid", p.pod_uid);
      }
      if (jp.contains("resolver") && jp.at("resolver").is_object()) {
        const json& r = jp.at("resolver");
        ResolverConfig config;
        get_if(r, "nameservers", config.nameservers);
        get_opt(r, "timeout_s", config.timeout_s);
        get_opt(r, "attempts", config.attempts);
        get_if(r, "error", config.error);
        p.resolver = std::move(config);
      }
      for (const auto& jt : jp.value("threads", json::array())) {
        ThreadInfo t;
        t.tid = as<int>(jt.at("tid"));
        get_if(jt, "comm", t.comm);
        t.state = state_char(jt, "state");
        if (jt.contains("syscall")) {
          const json& sc = jt.at("syscall");
          t.syscall.mode = mode_from(sc.value("mode", std::string()));
          get_if(sc, "nr", t.syscall.nr);
          auto args = value_or(sc, "args", std::vector<uint64_t>{});
          for (size_t i = 0; i < 6 && i < args.size(); ++i) t.syscall.args[i] = args[i];
          get_if(sc, "sp", t.syscall.sp);
          get_if(sc, "pc", t.syscall.pc);
        }
        if (jt.contains("memory")) {
          const json& m = jt.at("memory");
          get_opt(m, "futex_word", t.memory.futex_word);
          get_if(m, "futex_bytes", t.memory.futex_bytes);
          get_if(m, "poll_fds", t.memory.poll_fds);
          get_opt(m, "timeout_s", t.memory.timeout_s);
          get_if(m, "timeout_absolute", t.memory.timeout_absolute);
        }
        get_if(jt, "ns_tid", t.ns_tid);
        get_if(jt, "voluntary_switches", t.voluntary_switches);
        get_if(jt, "tracer_pid", t.tracer_pid);
        get_if(jt, "tracer_comm", t.tracer_comm);
        get_if(jt, "involuntary_switches", t.involuntary_switches);
        if (jt.contains("cpu_ns")) {
          auto v = as<std::vector<uint64_t>>(jt.at("cpu_ns"));
          if (v.size() == 2) t.cpu_ns_start = v[0], t.cpu_ns_end = v[1];
        }
        if (jt.contains("io_bytes")) {
          auto v = as<std::vector<uint64_t>>(jt.at("io_bytes"));
          if (v.size() == 2) t.io_bytes_start = v[0], t.io_bytes_end = v[1];
        }
        get_if(jt, "progress_sampled", t.progress_sampled);
        if (jt.contains("runs")) {
          auto v = as<std::vector<uint64_t>>(jt.at("runs"));
          if (v.size() == 2) t.runs_at_read = v[0], t.runs_end = v[1];
        }
        if (jt.contains("poll") && jt.at("poll").is_object()) {
          const json& pj = jt.at("poll");
          PollWatch w;
          get_if(pj, "watched_s", w.watched_s);
          get_if(pj, "sleeps", w.sleeps);
          get_if(pj, "cpu_ns", w.cpu_ns);
          get_if(pj, "samples", w.samples);
          get_if(pj, "asleep", w.asleep);
          get_if(pj, "lock_fds", w.lock_fds);
          t.poll = std::move(w);
        }
        if (jt.contains("kernel") && jt.at("kernel").is_object()) {
          const json& k = jt.at("kernel");
          KernelTaskView v;
          get_if(k, "state", v.state);
          get_if(k, "task_flags", v.task_flags);
          get_if(k, "on_cpu", v.on_cpu);
          get_if(k, "off_cpu_ns", v.off_cpu_ns);
          get_if(k, "sum_exec_ns", v.sum_exec_ns);
          get_if(k, "nvcsw", v.nvcsw);
          get_if(k, "nivcsw", v.nivcsw);
          get_if(k, "user_ip", v.user_ip);
          get_if(k, "user_sp", v.user_sp);
          get_if(k, "user_bp", v.user_bp);
          get_if(k, "stack_error", v.stack_error);
          for (const auto& f : k.value("stack", json::array()))
            v.stack.push_back({as<uint64_t>(f.at("addr")), f.value("symbol", std::string())});
          t.kernel = v;
        }
        for (const auto& jf : jt.value("python_stack", json::array())) {
          if (jf.is_object()) t.python_stack.push_back(user_frame_from_json(jf, UserFrame::Kind::Python));
        }
        get_if(jt, "python_stack_error", t.python_stack_error);
        for (const auto& jf : jt.value("native_stack", json::array())) {
          if (jf.is_object()) t.native_stack.push_back(user_frame_from_json(jf, UserFrame::Kind::Native));
        }
        get_if(jt, "native_stack_error", t.native_stack_error);
        get_if(jt, "holds_gil", t.holds_gil);
        if (jt.contains("python_lock") && jt.at("python_lock").is_object()) {
          const json& l = jt.at("python_lock");
          PythonLockWait lock;
          get_if(l, "mutex", lock.mutex);
          get_if(l, "kind", lock.kind);
          get_if(l, "object", lock.object);
          get_if(l, "object_type", lock.object_type);
          get_if(l, "owner_tid", lock.owner_tid);
          t.python_lock = std::move(lock);
        }
        get_if(jt, "asyncio_loop", t.asyncio_loop);
        get_if(jt, "asyncio_running_task", t.asyncio_running_task);
        p.threads.push_back(std::move(t));
      }
      for (const auto& jtask : jp.value("asyncio_tasks", json::array())) {
        if (!jtask.is_object()) continue;
        AsyncioTask task;
        get_if(jtask, "address", task.address);
        get_if(jtask, "name", task.name);
        get_if(jtask, "tid", task.tid);
        for (const auto& jf : jtask.value("coroutine_stack", json::array()))
          if (jf.is_object())
            task.coroutine_stack.push_back(user_frame_from_json(jf, UserFrame::Kind::Python));
        get_if(jtask, "awaits", task.awaits);
        get_if(jtask, "awaits_type", task.awaits_type);
        get_if(jtask, "awaits_refcount", task.awaits_refcount);
        get_if(jtask, "awaits_own_refs", task.awaits_own_refs);
        get_if(jtask, "awaited_by", task.awaited_by);
        get_if(jtask, "error", task.error);
        p.asyncio_tasks.push_back(std::move(task));
      }
      get_if(jp, "asyncio_error", p.asyncio_error);
      for (const auto& jf : jp.value("fds", json::array())) {
        FdEntry f;
        f.fd = as<int>(jf.at("fd"));
        get_if(jf, "link", f.link);
        f.kind = fd_kind_from(jf.value("kind", std::string()));
        get_if(jf, "inode", f.inode);
        get_if(jf, "flags", f.flags);
        get_if(jf, "pos", f.pos);
        get_opt(jf, "eventfd_id", f.eventfd_id);
        get_opt(jf, "pidfd_pid", f.pidfd_pid);
        get_opt(jf, "signal_mask", f.signal_mask);
        for (const auto& e : jf.value("epoll", json::array()))
          f.epoll.push_back(
              {as<int>(e.at("fd")), value_or(e, "events", 0u), value_or(e, "inode", uint64_t{0})});
        get_if(jf, "ready_events", f.ready_events);
        get_if(jf, "queued_bytes", f.queued_bytes);
        get_if(jf, "mnt_id", f.mnt_id);
        get_device(jf, f.dev_major, f.dev_minor);
        f.locks = file_locks_from_json(jf, "locks");
        p.fds.push_back(std::move(f));
      }
      for (const auto& jm : jp.value("mounts", json::array())) {
        if (!jm.is_object()) continue;
        MountEntry m;
        get_if(jm, "mount_id", m.mount_id);
        get_if(jm, "parent_id", m.parent_id);
        get_device(jm, m.dev_major, m.dev_minor);
        get_if(jm, "root", m.root);
        get_if(jm, "mount_point", m.mount_point);
        get_if(jm, "mount_options", m.mount_options);
        get_if(jm, "fstype", m.fstype);
        get_if(jm, "source", m.source);
        get_if(jm, "super_options", m.super_options);
        p.mounts.push_back(std::move(m));
      }
      for (const auto& jm : jp.value("maps", json::array())) {
        Mapping m;
        m.start = as<uint64_t>(jm.at("start"));
        m.end = as<uint64_t>(jm.at("end"));
        get_if(jm, "offset", m.offset);
        get_if(jm, "perms", m.perms);
        get_device(jm, m.dev_major, m.dev_minor);
        get_if(jm, "inode", m.inode);
        get_if(jm, "path", m.path);
        p.maps.push_back(std::move(m));
      }
      s.processes.push_back(std::move(p));
    }
    for (const auto& jk : j.value("sockets", json::array())) {
      SocketInfo k;
      k.inode = as<uint64_t>(jk.at("inode"));
      get_if(jk, "netns", k.netns);
      get_if(jk, "family", k.family);
      get_if(jk, "state", k.state);
      get_if(jk, "local", k.local);
      get_if(jk, "remote", k.remote);
      get_if(jk, "rx_queue", k.rx_queue);
      get_if(jk, "tx_queue", k.tx_queue);
      get_if(jk, "peer_inode", k.peer_inode);
      get_if(jk, "pending_on_listener", k.pending_on_listener);
      get_if(jk, "remote_is_local_host", k.remote_is_local_host);
      s.sockets.push_back(std::move(k));
    }
    s.file_locks = file_locks_from_json(j, "file_locks");
    if (j.contains("shm") && j.at("shm").is_object()) {
      const json& sh = j.at("shm");
      get_if(sh, "available", s.shm.available);
      get_if(sh, "mount_path", s.shm.mount_path);
      get_if(sh, "size_bytes", s.shm.size_bytes);
      get_if(sh, "used_bytes", s.shm.used_bytes);
      get_if(sh, "unlinked_mapped_bytes", s.shm.unlinked_mapped_bytes);
      for (const auto& g : sh.value("largest", json::array())) {
        ShmSegment seg;
        get_if(g, "name", seg.name);
        get_if(g, "size_bytes", seg.size_bytes);
        get_if(g, "allocated_bytes", seg.allocated_bytes);
        get_if(g, "mapped_by", seg.mapped_by);
        s.shm.largest.push_back(std::move(seg));
      }
    }
    if (!s.process(s.target_pid)) return make_error("the snapshot does not contain its target process");
    return s;
  } catch (const json::exception& e) {
    return make_error(fmt::format("malformed snapshot: {}", e.what()));
  } catch (const std::out_of_range& e) {
    return make_error(fmt::format("malformed snapshot: {}", e.what()));
  }
}

Result<Snapshot> snapshot_from_json_text(const std::string& text) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return make_error("not valid JSON (truncated or corrupt file?)");
  return snapshot_from_json(j);
}

}  // namespace hangtrace
