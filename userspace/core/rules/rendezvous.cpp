// rendezvous-wait: a process of the job still joining its process group --
// in init_process_group, its rendezvous, the TCPStore's wait for every rank
// to connect, the store barrier at its end, an elastic rendezvous -- past
// --stall-after: ranks that should have joined have not (a node that did
// not come up, a rank that died or hangs before init, a wrong MASTER_ADDR,
// MASTER_PORT or WORLD_SIZE). The store's own sockets say how many joined.
#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "hangtrace/collectives.h"
#include "hangtrace/jobs.h"
#include "hangtrace/text.h"
#include "rules.h"

namespace hangtrace::rules {

namespace {

// "127.0.0.1:29500" / "[::ffff:127.0.0.1]:29500" -> 29500; 0 when none.
int port_of(std::string_view address) {
  const size_t colon = address.rfind(':');
  if (colon == std::string_view::npos) return 0;
  int port = 0;
  for (char c : address.substr(colon + 1)) {
    if (c < '0' || c > '9' || port > 65535) return 0;
    port = port * 10 + (c - '0');
  }
  return port <= 65535 ? port : 0;
}

bool is_tcp(const SocketInfo& s) { return s.family == "tcp" || s.family == "tcp6"; }

// The store a process serves (the TCPStore master, in rank 0): the ports it
// listens on, and the connections accepted on each (every rank's client,
// its own included, holds one).
struct StoreSide {
  int port = 0;
  int accepted = 0;
};
std::vector<StoreSide> served_stores(const RuleContext& ctx, const ProcessInfo& p) {
  std::vector<const SocketInfo*> sockets;
  for (const auto& fd : p.fds)
    if (fd.kind == FdKind::Socket)
      if (const SocketInfo* s = ctx.snap.socket(fd.inode); s && is_tcp(*s)) sockets.push_back(s);
  std::vector<StoreSide> out;
  std::set<int> ports;
  for (const SocketInfo* s : sockets)
    if (s->state == "LISTEN")
      if (int port = port_of(s->local); port && ports.insert(port).second) out.push_back({port, 0});
  for (auto& store : out)
    for (const SocketInfo* s : sockets)
      if (s->state == "ESTABLISHED" && port_of(s->local) == store.port) ++store.accepted;
  return out;
}

}  // namespace

std::vector<Finding> rendezvous_findings(const RuleContext& ctx) {
  std::vector<Finding> out;
  for (const auto& p : ctx.snap.processes) {
    if (p.role == ProcessRole::Peer || !ctx.in_tree(p.pid)) continue;
    // The main thread's, else the first thread's that is in one.
    const ThreadInfo* in = nullptr;
    std::optional<RendezvousCall> call;
    for (const auto& t : p.threads)
      if (auto r = rendezvous_in_progress(t); r && (!call || t.tid == p.pid)) {
        call = std::move(r);
        in = &t;
        if (t.tid == p.pid) break;
      }
    if (!call) continue;
    // How long it has been joining: at most the process's age; its current
    // wait (a poll loop wakes every few ms) says nothing of that.
    const std::optional<double> age = p.age_s;
    const bool long_enough = age && *age >= ctx.opt.stall_after_s;
    Finding f(FindingKind::RendezvousWait);
    f.pids = {p.pid};
    f.tids = {in->tid};
    const std::string who =
        p.rank ? fmt::format("rank {} (pid {})", *p.rank, p.pid) : ctx.thread_label(in->tid);
    const std::vector<StoreSide> stores = served_stores(ctx, p);
    // A launcher's agent joins its own rendezvous, of nodes, before it
    // starts any rank: its command line says for how many and where.
    const std::optional<LauncherRendezvous> launcher = launcher_rendezvous(p.comm, p.cmdline);
    const std::optional<int> nodes = launcher ? launcher->fixed_nodes() : std::nullopt;
    const std::string members = launcher ? "nodes" : "ranks";
    std::string joined;
    nlohmann::json store_json = nullptr;
    // The store master counts its ranks' connections; a rank that only
    // connects to it sees nothing of the others.
    if (call->store_master && stores.size() == 1) {
      const StoreSide& s = stores.front();
      const std::string of = p.world_size ? fmt::format(" of world size {}", *p.world_size)
                             : nodes      ? fmt::format(" of {} nodes", *nodes)
                                          : std::string();
      joined = fmt::format("the store on port {} has accepted {} connection{}{}", s.port, s.accepted,
                           s.accepted == 1 ? "" : "s", of);
      store_json = {{"port", s.port}, {"accepted", s.accepted}};
      f.evidence.push_back(fmt::format("{} listens on port {} (the TCPStore) with {} accepted connection{}",
                                       who, s.port, s.accepted, s.accepted == 1 ? "" : "s"));
    }
    // The job's ranks on this host, and where each is.
    nlohmann::json present = nlohmann::json::array();
    std::vector<std::string> here;
    for (const auto& q : ctx.snap.processes) {
      if (!jobs::is_rank_process(ctx.snap, q) || q.role == ProcessRole::Peer) continue;
      bool joining = false;
      for (const auto& t : q.threads) joining = joining || rendezvous_in_progress(t).has_value();
      present.push_back({{"rank", *q.rank}, {"pid", q.pid}, {"joining", joining}});
      here.push_back(fmt::format("rank {}{}", *q.rank, joining ? "" : " (past init)"));
    }
    const std::string since = age ? fmt::format("for up to {}", format_seconds(*age)) : "";
    const std::string what =
        launcher ? fmt::format("{}'s rendezvous ({} at {}, --nnodes {}; {})", jobs::program_of(p.cmdline),
                               launcher->backend, launcher->endpoint, launcher->nnodes, call->stage)
                 : fmt::format("its process group ({})", call->stage);
    f.summary = fmt::format("{} is still joining {}{}{}: {} that should have joined have not", who, what,
                            since.empty() ? "" : " ", since, members);
    if (!joined.empty()) f.summary += fmt::format(" ({})", joined);
    f.evidence.push_back(
        fmt::format("{} is in {}: {}", ctx.thread_label(in->tid), call->stage, call->evidence));
    if (!call->caller.empty())
      f.evidence.push_back(fmt::format("called from {} ({})", call->caller, call->caller_function));
    if (age)
      f.evidence.push_back(
          fmt::format("the process started {} ago (the join began after that)", format_seconds(*age)));
    if (!here.empty())
      f.evidence.push_back(fmt::format("ranks of the job on this host: {}", fmt::join(here, ", ")));
    ctx.add_thread_evidence(f, in->tid);
    f.chain.push_back({ctx.thread_label(in->tid), "waits in", call->stage});
    f.chain.push_back({call->stage, "needs",
                       p.world_size ? fmt::format("every rank of world size {} to join", *p.world_size)
                       : nodes      ? fmt::format("every node of {} to join", *nodes)
                                    : fmt::format("every {} to join", launcher ? "node" : "rank")});
    f.chain_tids = {in->tid};
    // Its poll loop (TCPStore::waitForWorkers checks every 10 ms) burns a
    // little CPU: that is waiting, not progress.
    f.severity = long_enough ? Severity::Critical : Severity::Warning;
    // A rank may still be on its way: never certain.
    f.confidence = Confidence::Probable;
    f.details = {{"pid", p.pid},
                 {"tid", in->tid},
                 {"rank", p.rank ? nlohmann::json(*p.rank) : nlohmann::json(nullptr)},
                 {"world_size", p.world_size ? nlohmann::json(*p.world_size) : nlohmann::json(nullptr)},
                 {"stage", call->stage},
                 {"evidence", call->evidence},
                 {"caller", call->caller.empty() ? nlohmann::json(nullptr) : nlohmann::json(call->caller)},
                 {"store", store_json},
                 {"ranks_here", present},
                 {"age_s", age ? nlohmann::json(*age) : nlohmann::json(nullptr)}};
    if (launcher)
      f.details["launcher"] = {
          {"nnodes", launcher->nnodes}, {"backend", launcher->backend}, {"endpoint", launcher->endpoint}};
    if (launcher)
      f.advice.push_back(fmt::format(
          "A node has not joined the launcher's rendezvous at {}: start {} on every node of the {} with the "
          "same --rdzv_endpoint (or --master_addr/--master_port) and --nnodes{}, and check that each "
          "reaches {} (firewall, the address resolving to this host).",
          launcher->endpoint, jobs::program_of(p.cmdline), launcher->nnodes,
          launcher->backend == "static" ? ", each with its own --node_rank" : "", launcher->endpoint));
    f.advice.insert(
        f.advice.end(),
        {
            "A rank has not reached init_process_group: check that every node and process of the job started "
            "(the "
            "launcher's or scheduler's log for the missing ranks: a node that did not come up, a crash or "
            "hang "
            "before init), that WORLD_SIZE matches the ranks launched, and that every rank reaches "
            "MASTER_ADDR:MASTER_PORT (firewall, GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME).",
            "Give init_process_group a timeout (timeout=datetime.timedelta(minutes=...)) so a missing rank "
            "fails "
            "the job with its name instead of hanging.",
        });
    out.push_back(std::move(f));
  }
  return out;
}

}  // namespace hangtrace::rules
