#include "hangtrace/collectives.h"
#include "hangtrace/job_identity.h"
#include "hangtrace/text.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <limits>
#include <vector>

namespace hangtrace {

namespace {

std::optional<int> parse_non_negative(std::string_view text) {
  if (text.empty() || text.size() > 9) return std::nullopt;
  int value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value < 0) return std::nullopt;
  return value;
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

bool starts_with(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }

bool contains(std::string_view s, std::string_view part) { return s.find(part) != std::string_view::npos; }

// The public collectives of torch/distributed/distributed_c10d.py (1.x and
// 2.x names, including the deprecated ones): a Python frame in one of them
// means the thread is inside that collective, usually in Work.wait().
constexpr std::array<std::string_view, 29> kPythonCollectives = {
    "all_reduce",
    "all_reduce_coalesced",
    "all_reduce_multigpu",
    "reduce",
    "reduce_multigpu",
    "broadcast",
    "broadcast_multigpu",
    "broadcast_object_list",
    "all_gather",
    "all_gather_multigpu",
    "all_gather_into_tensor",
    "_all_gather_base",
    "all_gather_coalesced",
    "all_gather_object",
    "gather",
    "gather_object",
    "scatter",
    "scatter_object_list",
    "reduce_scatter",
    "reduce_scatter_multigpu",
    "reduce_scatter_tensor",
    "_reduce_scatter_base",
    "all_to_all",
    "all_to_all_single",
    "barrier",
    "monitored_barrier",
    "send",
    "recv",
    "_store_based_barrier",
};

bool is_python_collective(std::string_view function) {
  // 3.11+ frames carry the qualified name; module-level functions have none.
  for (auto name : kPythonCollectives)
    if (function == name) return true;
  return false;
}

// "/usr/lib/python3/dist-packages/torch/distributed/distributed_c10d.py" ->
// "torch/distributed/distributed_c10d.py": the part a reader recognizes.
std::string short_python_path(std::string_view file) {
  auto at = file.rfind("/torch/");
  if (at != std::string_view::npos) return std::string(file.substr(at + 1));
  return std::string(file);
}

// Demangled names carry the parameter list (and for templates a return type):
// match on the part before the parameters. "(anonymous namespace)" is part
// of the name, not a parameter list.
std::string_view without_parameters(std::string_view function) {
  constexpr std::string_view kAnonymous = "(anonymous namespace)";
  size_t from = 0;
  while (true) {
    auto paren = function.find('(', from);
    if (paren == std::string_view::npos) return function;
    if (function.substr(paren, kAnonymous.size()) != kAnonymous) return function.substr(0, paren);
    from = paren + kAnonymous.size();
  }
}

std::string backend_of(const UserFrame& frame) {
  std::string_view name = without_parameters(frame.function);
  // torch's own libraries export only their dynamic symbols; gloo's
  // algorithms live in libgloo.so (or linked into libtorch_cpu).
  if (contains(name, "ProcessGroupGloo") || contains(name, "gloo::") ||
      starts_with(basename_of(frame.file), "libgloo"))
    return "gloo";
  // NCCL's API functions are also exported as pnccl* (the profiling aliases).
  if (contains(name, "ProcessGroupNCCL") || starts_with(name, "nccl") || starts_with(name, "pnccl") ||
      starts_with(basename_of(frame.file), "libnccl"))
    return "nccl";
  return "";
}

struct NativeOp {
  std::string_view marker;  // part of the symbol, before its parameters
  std::string_view op;
  std::string_view backend;
};

// Symbols that name the algorithm a native backend thread runs: gloo's
// collective entry points and ProcessGroupGloo's work classes (gloo runs each
// collective on a worker thread that has no Python frames), and NCCL's API.
// Only these: gloo's transport internals (Pair::recv, UnboundBuffer::waitRecv)
// sit inside any collective and would name the wrong one.
constexpr std::array<NativeOp, 31> kNativeOps = {{
    {"AsyncAllreduceCoalescedWork", "all_reduce_coalesced", "gloo"},
    {"AsyncSparseAllreduceWork", "all_reduce", "gloo"},
    {"AsyncAllreduceWork", "all_reduce", "gloo"},
    {"AsyncBroadcastWork", "broadcast", "gloo"},
    {"AsyncReduceWork", "reduce", "gloo"},
    {"AsyncAllgatherCoalescedWork", "all_gather_coalesced", "gloo"},
    {"AsyncAllgatherWork", "all_gather", "gloo"},
    {"AsyncGatherWork", "gather", "gloo"},
    {"AsyncScatterWork", "scatter", "gloo"},
    {"AsyncAlltoallWork", "all_to_all", "gloo"},
    {"AsyncBarrierWork", "barrier", "gloo"},
    {"AsyncReduceScatterWork", "reduce_scatter", "gloo"},
    {"gloo::allreduce", "all_reduce", "gloo"},
    {"gloo::broadcast", "broadcast", "gloo"},
    {"gloo::reduce", "reduce", "gloo"},
    {"gloo::allgatherv", "all_gather", "gloo"},
    {"gloo::allgather", "all_gather", "gloo"},
    {"gloo::gatherv", "gather", "gloo"},
    {"gloo::gather", "gather", "gloo"},
    {"gloo::scatter", "scatter", "gloo"},
    {"gloo::alltoallv", "all_to_all", "gloo"},
    {"gloo::alltoall", "all_to_all", "gloo"},
    {"gloo::barrier", "barrier", "gloo"},
    {"ncclAllReduce", "all_reduce", "nccl"},
    {"ncclBroadcast", "broadcast", "nccl"},
    {"ncclReduceScatter", "reduce_scatter", "nccl"},
    {"ncclReduce", "reduce", "nccl"},
    {"ncclAllGather", "all_gather", "nccl"},
    {"ncclSend", "send", "nccl"},
    {"ncclRecv", "recv", "nccl"},
    {"ncclBcast", "broadcast", "nccl"},
}};

const NativeOp* native_op(const UserFrame& frame) {
  std::string_view name = without_parameters(frame.function);
  for (const auto& entry : kNativeOps) {
    auto at = name.find(entry.marker);
    if (at == std::string_view::npos) continue;
    // "gloo::reduce" must not match "gloo::reduce_scatter"; class names are
    // followed by "::", free functions by "<" or the end.
    size_t after = at + entry.marker.size();
    if (after < name.size() && name[after] != ':' && name[after] != '<') continue;
    return &entry;
  }
  return nullptr;
}

std::string native_evidence(const UserFrame& frame) {
  std::string_view name = without_parameters(frame.function);
  std::string module = basename_of(frame.file);
  if (module.empty()) return fmt::format("native: {}", name);
  return fmt::format("native: {} ({})", name, module);
}

// Frames only seen while a collective is being carried out, not in a
// backend's idle threads.
bool is_active_backend_frame(const UserFrame& frame) {
  std::string_view name = without_parameters(frame.function);
  constexpr std::array<std::string_view, 7> kActive = {
      "ProcessGroupGloo::AsyncWork::execute", "ProcessGroupGloo::SendWork::wait",
      "ProcessGroupGloo::RecvWork::wait",     "gloo::transport::tcp::UnboundBuffer::wait",
      "gloo::transport::tcp::Pair::",         "ProcessGroupNCCL::WorkNCCL::",
      "ProcessGroupNCCL::collective",
  };
  for (auto marker : kActive)
    if (contains(name, marker)) return true;
  return native_op(frame) != nullptr;
}

// The first Python frame outward from `from` that is not torch's own.
void set_caller(const std::vector<UserFrame>& py, size_t from, std::string& caller, std::string& function) {
  for (size_t j = from; j < py.size(); ++j) {
    if (contains(py[j].file, "/torch/") || py[j].file.empty()) continue;
    caller =
        py[j].line > 0 ? fmt::format("{}:{}", basename_of(py[j].file), py[j].line) : basename_of(py[j].file);
    function = py[j].function;
    return;
  }
}

std::string python_evidence(const UserFrame& frame) {
  std::string where = short_python_path(frame.file);
  return frame.line > 0 ? fmt::format("py: {} ({}:{})", frame.function, where, frame.line)
                        : fmt::format("py: {} ({})", frame.function, where);
}

}  // namespace

RankIdentity parse_rank_environment(std::string_view environ_bytes) {
  struct Family {
    std::string_view rank, world_size, local_rank;
  };
  static constexpr std::array<Family, 5> kFamilies = {{
      {"RANK", "WORLD_SIZE", "LOCAL_RANK"},
      {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
      {"PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"},
      {"PMIX_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
      {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"},
  }};
  std::array<RankIdentity, kFamilies.size()> seen;
  for_each_environ(environ_bytes, [&](std::string_view key, std::string_view value) {
    for (size_t i = 0; i < kFamilies.size(); ++i) {
      std::optional<int>* slot = key == kFamilies[i].rank         ? &seen[i].rank
                                 : key == kFamilies[i].world_size ? &seen[i].world_size
                                 : key == kFamilies[i].local_rank ? &seen[i].local_rank
                                                                  : nullptr;
      // The first entry that is a number: getenv() returns the first, and a
      // rank that is not a number is none.
      if (slot && !*slot) *slot = parse_non_negative(value);
    }
  });
  for (size_t i = 0; i < kFamilies.size(); ++i)
    if (seen[i].rank) {
      seen[i].source = std::string(kFamilies[i].rank);
      return seen[i];
    }
  // A size without a rank (a launcher's own environment): torch's, if any.
  RankIdentity none;
  none.world_size = seen[0].world_size;
  none.local_rank = seen[0].local_rank;
  return none;
}

int identity_argument_position(std::string_view file, std::string_view function) {
  // _wrap(fn, i, args, error_queues) in 1.x, _wrap(fn, i, args, error_file) in 2.x.
  if (function == "_wrap" && ends_with(file, "/torch/multiprocessing/spawn.py")) return 1;
  return -1;
}

namespace {

// The spawn index the outermost _wrap frame of any of `p`'s threads read.
std::optional<int> spawn_index(const ProcessInfo& p) {
  for (const auto& t : p.threads)
    for (auto f = t.python_stack.rbegin(); f != t.python_stack.rend(); ++f)
      if (f->argument && identity_argument_position(f->file, f->function) == 1 &&
          *f->argument <= std::numeric_limits<int>::max())
        return static_cast<int>(*f->argument);
  return std::nullopt;
}

// Whether a TCP connection of `p` goes to another host.
bool connected_off_host(const Snapshot& snap, const ProcessInfo& p) {
  for (const auto& fd : p.fds) {
    if (fd.kind != FdKind::Socket) continue;
    const SocketInfo* s = snap.socket(fd.inode);
    if (s && starts_with(s->family, "tcp") && s->state == "ESTABLISHED" && !s->remote_is_local_host)
      return true;
  }
  return false;
}

}  // namespace

void ranks_from_spawn_frames(Snapshot& snap) {
  for (auto& p : snap.processes) {
    if (p.rank || p.role == ProcessRole::Peer) continue;
    const auto index = spawn_index(p);
    if (!index) continue;
    p.local_rank = *index;
    if (connected_off_host(snap, p)) continue;
    p.rank = *index;
    p.rank_source = std::string(kSpawnIndexSource);
  }
}

std::optional<CollectiveCall> collective_in_progress(const ThreadInfo& thread) {
  std::string backend;
  const NativeOp* op_from_native = nullptr;
  const UserFrame* op_frame = nullptr;
  for (const auto& frame : thread.native_stack) {
    if (frame.kind != UserFrame::Kind::Native) continue;
    const NativeOp* op = op_from_native ? nullptr : native_op(frame);
    if (op) {
      op_from_native = op;
      op_frame = &frame;
    }
    if (backend.empty()) backend = op ? std::string(op->backend) : backend_of(frame);
  }
  const auto& py = thread.python_stack;
  for (size_t i = 0; i < py.size(); ++i) {
    const UserFrame& frame = py[i];
    if (!ends_with(frame.file, "distributed_c10d.py") || !is_python_collective(frame.function)) continue;
    std::string op = frame.function == "_store_based_barrier" ? "barrier" : frame.function;
    CollectiveCall call{std::move(op), backend, python_evidence(frame)};
    // Outward (callers follow), past torch's own wrappers (c10d_logger,
    // DDP, the Join context).
    set_caller(py, i + 1, call.caller, call.caller_function);
    return call;
  }
  if (op_from_native)
    return CollectiveCall{std::string(op_from_native->op), backend, native_evidence(*op_frame)};
  return std::nullopt;
}

std::optional<int> LauncherRendezvous::fixed_nodes() const {
  const size_t colon = nnodes.find(':');
  const auto low = parse_non_negative(std::string_view(nnodes).substr(0, colon));
  if (!low || *low == 0) return std::nullopt;
  if (colon == std::string::npos) return low;
  const auto high = parse_non_negative(std::string_view(nnodes).substr(colon + 1));
  return high == low ? low : std::nullopt;
}

std::optional<LauncherRendezvous> launcher_rendezvous(std::string_view comm, std::string_view cmdline) {
  const std::vector<std::string_view> words = command_words(cmdline, 256);
  // Where the launcher's own options begin.
  size_t first = 0;
  if (!words.empty() && (comm == "torchrun" || ends_with(words[0], "/torchrun") || words[0] == "torchrun")) {
    first = 1;
  } else {
    for (size_t i = 0; i + 1 < words.size() && !first; ++i)
      if (words[i] == "-m" &&
          (words[i + 1] == "torch.distributed.run" || words[i + 1] == "torch.distributed.launch"))
        first = i + 2;
  }
  if (!first) return std::nullopt;
  // Options that take no value; every other --option does (as its next
  // word, or after '='). The first other word is the program: its options
  // are its own.
  static constexpr std::array<std::string_view, 10> kFlags = {
      "--standalone", "--no_python", "--no-python", "--run_path", "--run-path",
      "-m",           "--module",    "--use_env",   "--use-env",  "--"};
  LauncherRendezvous r;
  std::string addr = "127.0.0.1", port = "29500";
  bool standalone = false;
  for (size_t i = first; i < words.size(); ++i) {
    std::string_view w = words[i];
    if (!starts_with(w, "-")) break;
    if (w == "--") break;
    if (std::find(kFlags.begin(), kFlags.end(), w) != kFlags.end()) {
      standalone = standalone || w == "--standalone";
      continue;
    }
    std::string_view name = w, value;
    if (size_t eq = w.find('='); eq != std::string_view::npos) {
      name = w.substr(0, eq);
      value = w.substr(eq + 1);
    } else if (i + 1 < words.size()) {
      value = words[++i];
    }
    // --rdzv-backend and --rdzv_backend are one option.
    std::string key(name.substr(std::min(name.find_first_not_of('-'), name.size())));
    std::replace(key.begin(), key.end(), '-', '_');
    if (key == "nnodes") r.nnodes = value;
    if (key == "rdzv_backend") r.backend = value;
    if (key == "rdzv_endpoint") r.endpoint = value;
    if (key == "master_addr") addr = value;
    if (key == "master_port") port = value;
  }
  if (r.nnodes.empty()) r.nnodes = "1:1";
  if (standalone) {
    r.backend = "c10d";
    r.endpoint = "localhost:29400";
  }
  if (r.backend.empty()) r.backend = "static";
  if (r.endpoint.empty()) r.endpoint = addr + ":" + port;
  return r;
}

std::optional<RendezvousCall> rendezvous_in_progress(const ThreadInfo& thread) {
  std::optional<RendezvousCall> out;
  for (const auto& frame : thread.native_stack) {
    if (frame.kind != UserFrame::Kind::Native) continue;
    std::string_view name = without_parameters(frame.function);
    if (!contains(name, "c10d::")) continue;
    RendezvousCall r;
    if (contains(name, "TCPStore::waitForWorkers")) {
      r.stage = "TCPStore::waitForWorkers";
      r.store_master = true;
    } else if (contains(name, "TCPClient::connect") || contains(name, "SocketConnectOp") ||
               contains(name, "Socket::connect")) {
      r.stage = "connecting to the TCPStore";
    } else if (contains(name, "TCPStore::TCPStore")) {
      r.stage = "TCPStore construction";
    } else {
      continue;
    }
    r.evidence = native_evidence(frame);
    out = std::move(r);
    break;
  }
  const auto& py = thread.python_stack;
  for (size_t i = 0; i < py.size(); ++i) {
    const UserFrame& f = py[i];
    std::string stage;
    if (ends_with(f.file, "distributed_c10d.py") && f.function == "_store_based_barrier")
      stage = "init_process_group's store barrier";
    else if (ends_with(f.file, "distributed_c10d.py") && f.function == "init_process_group")
      stage = "init_process_group";
    else if (contains(f.file, "torch/distributed/rendezvous.py"))
      stage = "init_process_group";
    else if (contains(f.file, "torch/distributed/elastic/rendezvous/"))
      stage = fmt::format("the elastic rendezvous ({})", f.function);
    if (stage.empty()) continue;
    if (!out) out = RendezvousCall{stage, python_evidence(f), "", "", false};
    set_caller(py, i + 1, out->caller, out->caller_function);
    return out;
  }
  // Native frames alone (a thread without Python frames): no caller.
  return out;
}

std::string collective_backend(const ProcessInfo& process, std::string* evidence) {
  struct Seen {
    std::string backend, evidence;
  };
  std::vector<Seen> active, present;
  auto note = [](std::vector<Seen>& seen, const std::string& backend, const UserFrame& frame, int tid) {
    for (const auto& s : seen)
      if (s.backend == backend) return;
    seen.push_back({backend, fmt::format("{} in thread {}", native_evidence(frame), tid)});
  };
  for (const auto& t : process.threads)
    for (const auto& frame : t.native_stack) {
      if (frame.kind != UserFrame::Kind::Native) continue;
      const NativeOp* op = native_op(frame);
      std::string backend = op ? std::string(op->backend) : backend_of(frame);
      if (backend.empty()) continue;
      note(is_active_backend_frame(frame) ? active : present, backend, frame, t.tid);
    }
  const std::vector<Seen>& decides = active.empty() ? present : active;
  if (decides.size() != 1) return "";
  if (evidence) *evidence = decides[0].evidence;
  return decides[0].backend;
}

std::optional<CollectiveCall> collective_in_progress(const ProcessInfo& process, const ThreadInfo& thread) {
  auto call = collective_in_progress(thread);
  if (call && call->backend.empty()) call->backend = collective_backend(process, &call->backend_evidence);
  return call;
}

std::optional<ProcessCollective> process_collective(const ProcessInfo& process) {
  std::optional<ProcessCollective> out;
  for (const auto& t : process.threads)
    if (auto c = collective_in_progress(process, t)) {
      out = ProcessCollective{std::move(*c), t.tid};
      if (t.tid == process.pid) break;  // the main thread's is the one to name
    }
  return out;
}

}  // namespace hangtrace
