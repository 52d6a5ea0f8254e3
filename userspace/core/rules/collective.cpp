// collective-wait: a rank inside a collective (all_reduce, barrier, ...)
// while a peer rank of the same job is not, and what that peer does instead.
// Works for any torch.distributed backend from the stacks (gloo over TCP,
// NCCL), and for NCCL also from the uprobes' per-thread call counts.
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include "hangtrace/collectives.h"
#include "hangtrace/gpu.h"
#include "hangtrace/jobs.h"
#include "hangtrace/text.h"
#include "rules.h"

namespace hangtrace {

RankActivity rank_activity(const WaitGraph& graph, const ProcessInfo& p) {
  RankActivity a;
  const ThreadInfo* main = p.thread(p.pid);
  if (!main && !p.threads.empty()) main = &p.threads.front();
  if (!main) {
    a.text = "unknown";
    return a;
  }
  a.tid = main->tid;
  if (!main->python_stack.empty()) {
    const UserFrame& f = main->python_stack.front();
    a.where = f.line ? fmt::format("{} ({}:{})", f.function, f.file, f.line) : f.function;
  }
  if (auto it = graph.threads.find(main->tid); it != graph.threads.end()) {
    const ThreadWait& w = it->second;
    a.wait = !w.summary.empty() ? w.summary : activity_name(w.activity);
    a.blocked_s = w.blocked_s;
  }
  if (a.where.empty())
    a.text = a.wait.empty() ? "unknown" : a.wait;
  else
    a.text = a.wait.empty() ? "in " + a.where : fmt::format("in {}, {}", a.where, a.wait);
  return a;
}

namespace rules {

namespace {

struct RankView {
  const ProcessInfo* process = nullptr;
  std::optional<CollectiveCall> call;  // the collective one of its threads is in
  int tid = 0;                         // that thread
  uint64_t nccl_calls = 0;             // NCCL collectives it made while traced (uprobes)
  bool nccl_in_progress = false;
};

std::string rank_text(const ProcessInfo& p) {
  return p.rank ? fmt::format("rank {} (pid {})", *p.rank, p.pid) : fmt::format("pid {}", p.pid);
}

std::string doing_text(const RuleContext& ctx, const ProcessInfo& p) {
  return rank_activity(ctx.graph, p).text;
}

// The ranks of one job: processes whose environment names a rank; without
// any, the processes the collective's sockets connect (gloo's full mesh).
std::vector<const ProcessInfo*> job_ranks(const RuleContext& ctx, const ProcessInfo& waiting) {
  std::vector<const ProcessInfo*> out;
  for (const auto& p : ctx.snap.processes) {
    // A DataLoader worker inherits its rank's environment: it is not a rank.
    if (!jobs::is_rank_process(ctx.snap, p) ||
        (waiting.world_size && p.world_size && *p.world_size != *waiting.world_size))
      continue;
    out.push_back(&p);
  }
  if (!out.empty()) return out;
  std::set<uint64_t> mine;
  for (const auto& fd : waiting.fds)
    if (fd.kind == FdKind::Socket) mine.insert(fd.inode);
  std::set<uint64_t> peers;
  for (uint64_t inode : mine)
    if (const SocketInfo* s = ctx.snap.socket(inode); s && s->peer_inode && !mine.count(s->peer_inode))
      peers.insert(s->peer_inode);
  out.push_back(&waiting);
  for (const auto& p : ctx.snap.processes) {
    if (p.pid == waiting.pid || p.role == ProcessRole::Peer) continue;
    for (const auto& fd : p.fds)
      if (fd.kind == FdKind::Socket && peers.count(fd.inode)) {
        out.push_back(&p);
        break;
      }
  }
  return out.size() > 1 ? out : std::vector<const ProcessInfo*>{};
}

// What every process of the job is doing as a rank: the collective one of
// its threads is in (from its stacks, or the NCCL call the uprobes saw it
// in), and how many NCCL calls it made.
std::map<int, RankView> rank_views(const RuleContext& ctx) {
  std::map<int, RankView> views;  // by pid
  for (const auto& p : ctx.snap.processes) {
    if (p.role == ProcessRole::Peer) continue;
    RankView& v = views[p.pid];
    v.process = &p;
    // A rank still joining its process group is in no collective yet
    // (init_process_group's store barrier included): rendezvous-wait's.
    if (std::any_of(p.threads.begin(), p.threads.end(),
                    [](const ThreadInfo& t) { return rendezvous_in_progress(t).has_value(); }))
      continue;
    if (auto c = process_collective(p)) {
      v.call = c->call;
      v.tid = c->tid;
    }
  }
  if (ctx.live)
    for (const auto& t : ctx.live->gpu.threads) {
      auto it = views.find(t.pid);
      if (it == views.end()) continue;
      RankView& v = it->second;
      v.nccl_calls = std::max(v.nccl_calls, t.collectives);
      if (gpu_fn_is_nccl_transfer(t.in_fn)) {
        v.nccl_in_progress = true;
        if (!v.call) {
          std::string op = gpu_fn_name(t.in_fn);
          v.call = CollectiveCall{op, "nccl", fmt::format("uprobe: in {} #{}", op, t.collectives)};
          v.tid = t.tid;
        }
      }
    }
  return views;
}

const std::vector<std::string> kCollectiveAdvice = {
    "Every rank must make the same collectives in the same order: a rank that runs out of batches "
    "early (uneven data per rank) skips the last ones. Use a DistributedSampler with drop_last=True, "
    "or torch.distributed.algorithms.Join / model.join() for uneven inputs.",
    "Collectives behind a rank-dependent condition (if rank == 0: ... all_reduce) deadlock the same way: "
    "make every rank take the same path.",
    "Set a timeout on init_process_group (and TORCH_NCCL_ASYNC_ERROR_HANDLING=1 / "
    "TORCH_DISTRIBUTED_DEBUG=DETAIL) so a missing rank fails fast with its name instead of hanging.",
};

// Processes on this host that hold the other end of a waiting rank's TCP
// connection and are neither a waiting rank nor one's ancestor (a launcher
// serving the store) or descendant (a forked worker holds its rank's
// sockets too): the gloo/NCCL socket of a rank that is not elsewhere -- a
// forked helper of a dead rank.
std::vector<const ProcessInfo*> local_peer_holders(const RuleContext& ctx,
                                                   const std::vector<const RankView*>& waiting) {
  std::set<int> ranks;
  for (const RankView* w : waiting) ranks.insert(w->process->pid);
  auto related = [&](const ProcessInfo& p) {
    // Up from p to a waiting rank (p descends from it), or up from a
    // waiting rank to p (p is its ancestor); bounded walks.
    const ProcessInfo* at = &p;
    for (int i = 0; at && i < 64; ++i, at = ctx.snap.process(at->ppid))
      if (ranks.count(at->pid)) return true;
    for (int r : ranks) {
      const ProcessInfo* up = ctx.snap.process(r);
      for (int i = 0; up && i < 64; ++i, up = ctx.snap.process(up->ppid))
        if (up->pid == p.pid) return true;
    }
    return false;
  };
  std::set<uint64_t> peers;
  for (const RankView* w : waiting)
    for (const auto& fd : w->process->fds)
      if (fd.kind == FdKind::Socket)
        if (const SocketInfo* s = ctx.snap.socket(fd.inode);
            s && s->family.rfind("tcp", 0) == 0 && s->state == "ESTABLISHED" && s->peer_inode)
          peers.insert(s->peer_inode);
  std::vector<const ProcessInfo*> out;
  for (const auto& p : ctx.snap.processes) {
    if (related(p)) continue;
    for (const auto& fd : p.fds)
      if (fd.kind == FdKind::Socket && peers.count(fd.inode)) {
        out.push_back(&p);
        break;
      }
  }
  return out;
}

// World sizes up to this are listed rank by rank; beyond, counted (the
// environment is the target's: a WORLD_SIZE of 2^31 must not allocate).
constexpr int kListRanksUpTo = 65536;

// Every rank of the job this host sees waits in the collective, but the job
// has ranks this host does not run (WORLD_SIZE above the ranks seen): which
// of them is missing only their own hosts' snapshots can say. A warning, and
// probable, once the wait reaches --stall-after: a healthy multi-host job
// sits in all_reduce for milliseconds at a time.
std::optional<Finding> remote_ranks_finding(const RuleContext& ctx,
                                            const std::vector<const RankView*>& waiting) {
  const ProcessInfo& first = *waiting.front()->process;
  if (!first.world_size || *first.world_size < 2) return std::nullopt;
  const int world = *first.world_size;
  std::set<int> here;
  double waited = 0;
  for (const RankView* w : waiting) {
    if (!w->process->rank || w->process->world_size != first.world_size) return std::nullopt;
    if (*w->process->rank >= 0 && *w->process->rank < world) here.insert(*w->process->rank);
    if (auto it = ctx.graph.threads.find(w->tid); it != ctx.graph.threads.end() && it->second.blocked_s)
      waited = std::max(waited, *it->second.blocked_s);
  }
  const int elsewhere = world - static_cast<int>(here.size());
  if (elsewhere <= 0 || waited < ctx.opt.stall_after_s) return std::nullopt;
  std::string others = fmt::format("{} rank{}", elsewhere, elsewhere == 1 ? "" : "s");
  nlohmann::json remote = nlohmann::json::array();
  if (world <= kListRanksUpTo) {
    std::vector<int> missing;
    for (int r = 0; r < world; ++r)
      if (!here.count(r)) missing.push_back(r);
    others = fmt::format("{} {}", elsewhere == 1 ? "rank" : "ranks", number_runs(missing));
    remote = missing;
  }

  Finding f(FindingKind::CollectiveWait);
  const CollectiveCall& call = *waiting.front()->call;
  const std::string backend = call.backend.empty() ? "" : fmt::format(" ({})", call.backend);
  // "On other hosts" only when nothing here says otherwise: a local process
  // at the other end of the collective's connections, or a process of the
  // job the kernel killed (kernel_deaths.cpp: made before this rule).
  const std::vector<const ProcessInfo*> local = local_peer_holders(ctx, waiting);
  std::vector<const Finding*> deaths;
  for (const auto& other : ctx.findings)
    if (other.kind == FindingKind::ProcessKilled) deaths.push_back(&other);
  nlohmann::json waiting_json = nlohmann::json::array();
  std::vector<std::string> names;
  for (const RankView* w : waiting) {
    f.pids.push_back(w->process->pid);
    f.tids.push_back(w->tid);
    names.push_back(rank_text(*w->process));
    nlohmann::json j = {{"pid", w->process->pid},
                        {"tid", w->tid},
                        {"rank", *w->process->rank},
                        {"evidence", w->call->evidence}};
    if (auto it = ctx.graph.threads.find(w->tid); it != ctx.graph.threads.end() && it->second.blocked_s)
      j["blocked_s"] = *it->second.blocked_s;
    waiting_json.push_back(j);
    f.evidence.push_back(
        fmt::format("{} is in {}: {}", ctx.thread_label(w->tid), w->call->op, w->call->evidence));
  }
  const bool here_instead = !local.empty() || !deaths.empty();
  nlohmann::json local_json = nlohmann::json::array();
  std::vector<std::string> local_names;
  for (const ProcessInfo* p : local) {
    local_names.push_back(fmt::format("{} ({})", p->pid, p->comm));
    local_json.push_back({{"pid", p->pid}, {"comm", p->comm}, {"role", jobs::member_role(ctx.snap, p->pid)}});
    f.evidence.push_back(
        fmt::format("the other end of a connection of {} is held by {} ({}) on this host, not a "
                    "rank: {}",
                    names.front(), p->pid, p->comm, doing_text(ctx, *p)));
  }
  for (const Finding* d : deaths) f.evidence.push_back("the kernel log: " + d->summary);
  if (here_instead) {
    std::string why = !local.empty() ? fmt::format("its connection's other end is held by {} on this host",
                                                   fmt::join(local_names, ", "))
                                     : std::string("the kernel log shows a process of the job killed here");
    f.summary =
        fmt::format("{} {} waited {} in {}{} for {} of world size {}, which {} not running: {}",
                    fmt::join(names, ", "), waiting.size() > 1 ? "have" : "has", format_seconds(waited),
                    call.op, backend, others, world, elsewhere == 1 ? "is" : "are", why);
    if (!deaths.empty()) f.summary += "; " + deaths.front()->summary;
  } else {
    f.evidence.push_back(
        fmt::format("{} of world size {} {} not on this host: whether one of them is not in {} "
                    "only their own hosts can tell",
                    others, world, elsewhere == 1 ? "is" : "are", call.op));
    f.summary = fmt::format("{} {} waited {} in {}{} for the ranks on other hosts ({} of world size {})",
                            fmt::join(names, ", "), waiting.size() > 1 ? "have" : "has",
                            format_seconds(waited), call.op, backend, others, world);
  }
  f.chain.push_back({ctx.thread_label(waiting.front()->tid), "waits in", call.op + backend});
  f.chain.push_back({call.op, "needs", others + (here_instead ? " (not running)" : " on other hosts")});
  f.chain_tids = {waiting.front()->tid};
  // Facts of this host (a local holder, a death in the kernel log) make it
  // critical; ranks merely elsewhere stay a warning until their hosts tell.
  f.severity = here_instead ? Severity::Critical : Severity::Warning;
  f.confidence = Confidence::Probable;
  f.details = {{"collective", call.op},
               {"backend", call.backend},
               {"waiting", waiting_json},
               {"absent", nlohmann::json::array()},
               {"world_size", world},
               {"remote_ranks", remote},
               {"remote_rank_count", elsewhere},
               {"local_peer_holders", local_json},
               {"on_other_hosts", !here_instead},
               {"waited_s", waited}};
  f.advice = {
      "Merge the bundles of every rank (hangtrace merge DIR..., or hangtrace merge --prometheus URL "
      "--job ID from the daemons): it names the rank that is not in the collective, what it does "
      "instead and which rank stalled first."};
  f.advice.insert(f.advice.end(), kCollectiveAdvice.begin(), kCollectiveAdvice.end());
  return f;
}

std::string call_text(const CollectiveCall& call) {
  return call.caller.empty() ? call.op : fmt::format("{} at {}", call.op, call.caller);
}

// Every rank of the job this host runs is in a collective, but not in the
// same one: rank 0 in barrier() while rank 1 is in all_reduce() (a
// collective inside `if rank == 0:`). Each waits for the others to join its
// own, and none ever will. Critical once the waits reach --stall-after.
std::optional<Finding> mismatch_finding(const RuleContext& ctx, const std::vector<const RankView*>& waiting) {
  std::map<std::string, std::vector<const RankView*>> by_op;
  for (const RankView* w : waiting) by_op[w->call->op].push_back(w);
  if (by_op.size() < 2) return std::nullopt;
  Finding f(FindingKind::CollectiveMismatch);
  double waited = 0;
  bool all_blocked_long = true;
  nlohmann::json ranks = nlohmann::json::array();
  std::vector<std::string> parts;
  for (const RankView* w : waiting) {
    const ProcessInfo& p = *w->process;
    f.pids.push_back(p.pid);
    f.tids.push_back(w->tid);
    std::optional<double> blocked;
    if (const ThreadWait* tw = ctx.wait_of(w->tid)) blocked = tw->blocked_s;
    if (blocked) waited = std::max(waited, *blocked);
    if (!blocked || *blocked < ctx.opt.stall_after_s) all_blocked_long = false;
    parts.push_back(fmt::format("{} in {}", rank_text(p), call_text(*w->call)));
    nlohmann::json j = {
        {"pid", p.pid},
        {"tid", w->tid},
        {"rank", p.rank ? nlohmann::json(*p.rank) : nlohmann::json(nullptr)},
        {"collective", w->call->op},
        {"caller", w->call->caller.empty() ? nlohmann::json(nullptr) : nlohmann::json(w->call->caller)},
        {"caller_function", w->call->caller_function},
        {"evidence", w->call->evidence}};
    if (blocked) j["blocked_s"] = *blocked;
    ranks.push_back(j);
    f.evidence.push_back(
        fmt::format("{} is in {}: {}", ctx.thread_label(w->tid), w->call->op, w->call->evidence));
  }
  const RankView& first = *waiting.front();
  const RankView* other = nullptr;
  for (const RankView* w : waiting)
    if (w->call->op != first.call->op) {
      other = w;
      break;
    }
  std::vector<std::string> ops;
  for (const auto& [op, views] : by_op) ops.push_back(op);
  f.summary =
      fmt::format("the ranks are in different collectives: {}; each waits for the others to join its own",
                  fmt::join(parts, ", "));
  f.chain.push_back({ctx.thread_label(first.tid), "waits in", call_text(*first.call)});
  f.chain.push_back({first.call->op, "needs",
                     fmt::format("{} to call {} too", rank_text(*other->process), first.call->op)});
  f.chain.push_back({rank_text(*other->process), "is instead in", call_text(*other->call)});
  f.chain_tids = {first.tid};
  f.severity = all_blocked_long ? Severity::Critical : Severity::Warning;
  const bool ranks_known =
      std::all_of(waiting.begin(), waiting.end(), [](auto* w) { return w->process->rank; });
  f.confidence = ranks_known && all_blocked_long ? Confidence::Certain : Confidence::Probable;
  f.details = {{"collectives", ops}, {"ranks", ranks}, {"waited_s", waited}};
  f.advice = {
      fmt::format(
          "A collective inside a rank-dependent branch: {}. Every rank must call the same collectives "
          "in the same order: move it out of the `if rank == ...` branch (or make every rank call it).",
          fmt::join(parts, ", ")),
      "Set TORCH_DISTRIBUTED_DEBUG=DETAIL while you fix it: torch then checks that the ranks' collectives "
      "match and names the mismatch instead of hanging; give init_process_group a timeout so a hang fails.",
  };
  return f;
}

}  // namespace

std::vector<Finding> collective_wait_findings(const RuleContext& ctx) {
  std::map<int, RankView> views = rank_views(ctx);
  std::vector<Finding> out;
  std::set<int> reported;
  for (const auto& [pid, v] : views) {
    if (!v.call || reported.count(pid)) continue;
    std::vector<const ProcessInfo*> ranks = job_ranks(ctx, *v.process);
    if (ranks.empty()) ranks = {v.process};
    std::vector<const RankView*> waiting, absent;
    for (const ProcessInfo* r : ranks) {
      const RankView& rv = views[r->pid];
      (rv.call ? waiting : absent).push_back(&rv);
    }
    // NCCL collectives are asynchronous: a rank may have left the call and
    // wait in a synchronize. Fewer calls than a waiting rank made means it
    // never issued the one the others are in.
    uint64_t most = 0;
    for (const RankView* w : waiting) most = std::max(most, w->nccl_calls);
    if (absent.empty() && most) {
      for (const RankView* w : waiting)
        if (w->nccl_calls < most && !w->nccl_in_progress) absent.push_back(w);
      std::erase_if(waiting, [&](const RankView* w) {
        return std::find(absent.begin(), absent.end(), w) != absent.end();
      });
    }
    if (waiting.empty()) continue;
    if (absent.empty()) {
      if (auto f = mismatch_finding(ctx, waiting)) {
        for (const RankView* w : waiting) reported.insert(w->process->pid);
        out.push_back(std::move(*f));
        continue;
      }
      if (auto f = remote_ranks_finding(ctx, waiting)) {
        for (const RankView* w : waiting) reported.insert(w->process->pid);
        out.push_back(std::move(*f));
      }
      continue;
    }

    Finding f(FindingKind::CollectiveWait);
    const CollectiveCall& call = *waiting.front()->call;
    double waited = 0;
    nlohmann::json waiting_json = nlohmann::json::array(), absent_json = nlohmann::json::array();
    std::vector<std::string> waiting_names, absent_names;
    std::vector<int> absent_tids;
    bool blocked_unknown = false;  // no BPF view: how long is not known
    for (const RankView* w : waiting) {
      reported.insert(w->process->pid);
      f.pids.push_back(w->process->pid);
      f.tids.push_back(w->tid);
      std::optional<double> blocked;
      if (auto it = ctx.graph.threads.find(w->tid); it != ctx.graph.threads.end())
        blocked = it->second.blocked_s;
      if (blocked) waited = std::max(waited, *blocked);
      blocked_unknown = blocked_unknown || !blocked;
      nlohmann::json j = {{"pid", w->process->pid}, {"tid", w->tid}, {"evidence", w->call->evidence}};
      if (!w->call->backend_evidence.empty()) j["backend_evidence"] = w->call->backend_evidence;
      j["rank"] = w->process->rank ? nlohmann::json(*w->process->rank) : nlohmann::json(nullptr);
      if (blocked) j["blocked_s"] = *blocked;
      if (w->nccl_calls) j["nccl_calls"] = w->nccl_calls;
      waiting_json.push_back(j);
      waiting_names.push_back(rank_text(*w->process));
      f.evidence.push_back(
          fmt::format("{} is in {}: {}", ctx.thread_label(w->tid), w->call->op, w->call->evidence));
      if (!w->call->backend_evidence.empty()) f.evidence.push_back("backend: " + w->call->backend_evidence);
    }
    for (const RankView* a : absent) {
      reported.insert(a->process->pid);
      f.pids.push_back(a->process->pid);
      std::string doing = doing_text(ctx, *a->process);
      nlohmann::json j = {{"pid", a->process->pid}, {"doing", doing}};
      j["rank"] = a->process->rank ? nlohmann::json(*a->process->rank) : nlohmann::json(nullptr);
      if (a->nccl_calls) {
        j["nccl_calls"] = a->nccl_calls;
        f.evidence.push_back(fmt::format("{} made {} NCCL calls while traced, the waiting ranks up to {}",
                                         rank_text(*a->process), a->nccl_calls, most));
      }
      absent_json.push_back(j);
      absent_names.push_back(rank_text(*a->process));
      f.evidence.push_back(fmt::format("{} is not in any collective: {}", rank_text(*a->process), doing));
      // What it waits on is its own finding's (a debugger, a lock, a dead
      // pipe): named on the chain, not one of this finding's threads.
      absent_tids.push_back(a->process->pid);
      for (const auto& t : a->process->threads) f.waits_for_tids.push_back(t.tid);
    }
    std::string backend = call.backend.empty() ? "" : fmt::format(" ({})", call.backend);
    f.summary =
        fmt::format("{} wait{} in {}{} for {}, which {} not in it: {}", fmt::join(waiting_names, ", "),
                    waiting.size() > 1 ? "" : "s", call.op, backend, fmt::join(absent_names, ", "),
                    absent.size() > 1 ? "are" : "is", doing_text(ctx, *absent.front()->process));
    const RankView& first = *waiting.front();
    f.chain.push_back({ctx.thread_label(first.tid), "waits in", call.op + backend});
    f.chain.push_back({call.op, "needs", fmt::format("{}", fmt::join(absent_names, ", "))});
    f.chain.push_back({absent_names.front(), "is instead", doing_text(ctx, *absent.front()->process)});
    f.chain_tids = {first.tid};
    f.chain_tids.insert(f.chain_tids.end(), absent_tids.begin(), absent_tids.end());
    f.severity = waited >= ctx.opt.stall_after_s || blocked_unknown ? Severity::Critical : Severity::Warning;
    // Ranks named by their environment and the absent one seen outside any
    // collective: certain. Ranks inferred from sockets: probable.
    bool ranks_known = std::all_of(absent.begin(), absent.end(), [](auto* a) { return a->process->rank; });
    f.confidence = ranks_known ? Confidence::Certain : Confidence::Probable;
    f.details = {{"collective", call.op},
                 {"backend", call.backend},
                 {"waiting", waiting_json},
                 {"absent", absent_json},
                 {"waited_s", waited}};
    f.advice = kCollectiveAdvice;
    out.push_back(std::move(f));
  }
  return out;
}

}  // namespace rules
}  // namespace hangtrace
