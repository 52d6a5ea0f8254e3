// network-wait: a thread of the job blocked on a TCP/UDP socket for a long
// time, who holds the other end, and what the live window saw of the
// connection (retransmits, failed connects).
#include <netinet/tcp.h>

#include <map>
#include <set>

#include <fmt/format.h>

#include "hangtrace/abi.h"
#include "hangtrace/text.h"
#include "rules.h"

namespace hangtrace::rules {

namespace {

// A connected socket: its remote end has a port (an unconnected UDP socket
// shows "0.0.0.0:0").
bool has_remote(const WaitObject& o) {
  return !o.remote.empty() && o.remote.find(":0") != o.remote.size() - 2;
}

// What the live window saw between `pid` and `remote`: retransmits (any of
// its sockets to that address: a retry loop opens a new one each time) and
// connects that failed (SYN_SENT -> CLOSE).
void add_tcp_evidence(const LiveObservation& live, Finding& f, int pid, const std::string& remote) {
  size_t retransmits = 0, failed = 0;
  int state = 0;
  for (const auto& e : live.tcp) {
    if (e.tgid != pid || e.remote != remote) continue;
    if (e.type == HT_EV_TCP_RETRANSMIT) {
      ++retransmits;
      state = e.new_state;
    } else if (e.type == HT_EV_TCP_STATE && e.old_state == TCP_SYN_SENT && e.new_state == TCP_CLOSE) {
      ++failed;
    }
  }
  if (retransmits) {
    const char* why = state == TCP_SYN_SENT      ? ": the SYN is never answered"
                      : state == TCP_ESTABLISHED ? ": sent data is never acknowledged"
                                                 : "";
    f.evidence.push_back(fmt::format("live: {} TCP retransmit{} to {} in the {:.1f} s window (last in {}{})",
                                     retransmits, retransmits == 1 ? "" : "s", remote, live.duration_s,
                                     tcp_state_name(state), why));
  }
  if (failed)
    f.evidence.push_back(
        fmt::format("live: {} connect{} to {} failed (SYN_SENT -> CLOSE) in the {:.1f} s window", failed,
                    failed == 1 ? "" : "s", remote, live.duration_s));
}

Finding network_wait(const RuleContext& ctx, const ThreadWait& w, const WaitObject& o) {
  const int tid = w.tid;
  Finding f(FindingKind::NetworkWait);
  f.confidence = Confidence::Certain;
  add_unique(f.tids, tid);
  add_unique(f.pids, w.pid);
  bool main_waits = ctx.reachable_from_main(tid);
  f.severity = main_waits && w.blocked_s ? Severity::Critical : Severity::Warning;
  std::vector<int> peer_pids;
  for (int pid : o.holder_pids) add_unique(peer_pids, pid);
  f.details["local"] = o.local;
  f.details["remote"] = o.remote;
  f.details["peer_pids"] = peer_pids;
  f.details["blocked_s"] = w.blocked_s ? nlohmann::json(*w.blocked_s) : nlohmann::json(nullptr);
  f.details["remote_on_this_host"] = o.remote_on_this_host;
  std::string peer_text;
  if (!peer_pids.empty()) {
    peer_text = fmt::format("; the other end is held by {}", peer_labels(ctx, peer_pids));
  } else if (o.external) {
    peer_text = o.remote_on_this_host ? "; no process on this host holds the other end"
                                      : "; the other end is not on this host";
  }
  f.summary = fmt::format("{} has been waiting on the network {} ({} -> {}){}", ctx.thread_label(tid),
                          for_duration(w.blocked_s), o.local, o.remote, peer_text);
  ctx.add_thread_evidence(f, tid);
  for (int pid : peer_pids) ctx.add_thread_evidence(f, pid);
  for (const auto& n : o.notes) f.evidence.push_back(n);
  if (ctx.live) add_tcp_evidence(*ctx.live, f, w.pid, o.remote);
  if (main_waits) ctx.add_main_chain(f, tid, o.id);
  f.advice = {
      "Give network calls a timeout (socket.settimeout, requests.get(..., timeout=...), "
      "socket.setdefaulttimeout) so a silent server fails the step instead of hanging it.",
      "Download datasets and weights before training starts (and cache them); check proxy and "
      "firewall settings on this node.",
      "For torch.distributed/gloo: pass timeout= to init_process_group and set "
      "TORCH_DISTRIBUTED_DEBUG=DETAIL (NCCL_DEBUG=INFO for NCCL) to see which rank is missing.",
  };
  return f;
}

}  // namespace

std::string peer_labels(const RuleContext& ctx, const std::vector<int>& pids) {
  std::vector<std::string> parts;
  for (int pid : pids) {
    const ThreadWait* pw = ctx.wait_of(pid);
    parts.push_back(fmt::format("{}{}", ctx.thread_label(pid), pw ? ", which " + pw->summary : ""));
  }
  return fmt::format("{}", fmt::join(parts, "; "));
}

namespace {

std::string port_of(const std::string& endpoint) {
  const auto colon = endpoint.rfind(':');
  return colon == std::string::npos ? "" : endpoint.substr(colon + 1);
}

// The ports each thread listens on while it waits: a server's loop (poll or
// epoll over its listening socket and the connections it accepted). Read
// once per thread: a server may poll thousands of connections.
class ListeningPorts {
 public:
  explicit ListeningPorts(const RuleContext& ctx) : ctx_(ctx) {}
  bool listens_on(const ThreadWait& w, const std::string& port) {
    auto [it, added] = ports_.try_emplace(w.tid);
    if (added)
      for (const auto& id : w.objects)
        if (const WaitObject& o = ctx_.object(id); o.listening) it->second.insert(port_of(o.local));
    return it->second.count(port);
  }

 private:
  const RuleContext& ctx_;
  std::map<int, std::set<std::string>> ports_;
};

// Whether waiting on `o` is an idle wait rather than one for an answer:
//  - a server's loop waits on a connection it accepted (its local port is
//    one it listens on) for the client's next request, which it is owed by
//    nobody;
//  - a client waits on a connection whose server end a server's loop of the
//    job itself waits on too: the server is not working on a request of it,
//    so nothing is on its way (a watch or push channel: the TCPStore
//    client's listener thread). Not for a server outside the job: one that
//    hands requests to other threads (an asyncio download server) polls its
//    connections while a request is stuck, and its clients do wait for it.
bool idle_connection(const RuleContext& ctx, ListeningPorts& listening, const ThreadWait& w,
                     const WaitObject& o) {
  if (o.kind != ObjectKind::TcpSocket) return false;
  if (listening.listens_on(w, port_of(o.local))) return true;
  if (!o.peer_socket) return false;
  auto peer = ctx.graph.objects.find(fmt::format("socket:[{}]", o.peer_socket));
  if (peer == ctx.graph.objects.end()) return false;
  for (int waiter : peer->second.waiters)
    if (auto t = ctx.graph.threads.find(waiter); t != ctx.graph.threads.end() && ctx.in_tree(waiter) &&
                                                 listening.listens_on(t->second, port_of(peer->second.local)))
      return true;
  return false;
}

}  // namespace

std::vector<Finding> network_wait_findings(const RuleContext& ctx) {
  std::vector<Finding> out;
  ListeningPorts listening(ctx);
  for (const auto& [tid, w] : ctx.graph.threads) {
    if (w.activity != Activity::Blocked && w.activity != Activity::TimedWait) continue;
    if (!ctx.in_tree(tid) || is_dns_lookup(ctx, w)) continue;  // dns-wait's
    if (w.blocked_s && *w.blocked_s < ctx.opt.stall_after_s) continue;
    for (const auto& id : w.objects) {
      const WaitObject& o = ctx.object(id);
      if (o.kind != ObjectKind::TcpSocket && o.kind != ObjectKind::UdpSocket) continue;
      if (o.ready || !has_remote(o) || idle_connection(ctx, listening, w, o)) continue;
      out.push_back(network_wait(ctx, w, o));
    }
  }
  return out;
}

}  // namespace hangtrace::rules
