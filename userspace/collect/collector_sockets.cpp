// The collector's sockets: the tables of every network namespace involved
// (net/tcp*, udp*, unix and sock_diag for unix peers), the processes outside
// the tree holding the other end of what the job waits on, and the sockets
// the snapshot keeps.
#include <algorithm>
#include <cstdlib>
#include <set>
#include <unistd.h>

#include "collector_pass.h"
#include "netlink_diag.h"

namespace hangtrace::collector_pass {

void Collector::load_network_namespace(uint64_t netns, int reader_pid) {
  if (netns_sockets_.count(netns)) return;
  NetnsSockets& ns = netns_sockets_[netns];
  ns.netns = netns;
  ns.reader_pid = reader_pid;

  // TCP/UDP: peer = the socket in the same table with the tuple reversed.
  std::map<std::string, uint64_t> by_tuple;
  std::vector<std::pair<uint64_t, std::string>> reverse_keys;
  auto tuple_key = [](const std::string& proto, const std::string& a_ip, uint16_t a_port,
                      const std::string& b_ip, uint16_t b_port) {
    return fmt::format("{}|{}|{}|{}|{}", proto, procfs::unmap_ipv4(a_ip), a_port, procfs::unmap_ipv4(b_ip),
                       b_port);
  };
  for (std::string table : {"tcp", "tcp6", "udp", "udp6"}) {
    int err = 0;
    auto entries = proc_.inet_sockets(reader_pid, table, &err);
    if (!entries) {
      if (err != ENOENT)  // a kernel without IPv6 has no tcp6
        limitation(fmt::format("{} sockets not resolved: {}", table, entries.error()));
      continue;
    }
    std::string proto = table.substr(0, 3);
    for (auto& e : *entries) {
      if (e.info.inode == 0) continue;  // not accepted yet, TIME_WAIT: no fd can hold it
      e.info.netns = netns;
      if (e.state_code == 10 /*LISTEN*/ && proto == "tcp")
        ns.tcp_listeners.emplace(e.local_port, e.info.inode);
      if (proto == "udp" && e.remote_port == 0)
        ns.udp_bound.emplace(e.local_port, std::make_pair(procfs::unmap_ipv4(e.local_ip), e.info.inode));
      if (e.remote_port != 0) {
        by_tuple[tuple_key(proto, e.local_ip, e.local_port, e.remote_ip, e.remote_port)] = e.info.inode;
        reverse_keys.emplace_back(e.info.inode,
                                  tuple_key(proto, e.remote_ip, e.remote_port, e.local_ip, e.local_port));
      }
      ns.remote_ip[e.info.inode] = procfs::unmap_ipv4(e.remote_ip);
      ns.by_inode[e.info.inode] = std::move(e.info);
    }
  }
  for (const auto& [inode, key] : reverse_keys) {
    auto it = by_tuple.find(key);
    if (it != by_tuple.end() && it->second != inode) ns.by_inode[inode].peer_inode = it->second;
  }

  // Unix: /proc/net/unix for the state and the path, sock_diag for the peer.
  int err = 0;
  auto unix_entries = proc_.unix_sockets(reader_pid, &err);
  if (!unix_entries) {
    limitation(fmt::format("unix sockets not listed: {}", unix_entries.error()));
  } else {
    for (const auto& u : *unix_entries) {
      SocketInfo s;
      s.inode = u.inode;
      s.netns = netns;
      s.family = "unix";
      s.state = u.state;
      s.local = u.path;
      s.remote_is_local_host = true;  // a unix socket's other end is always on this host
      ns.by_inode[u.inode] = std::move(s);
    }
  }
  std::string netns_path;
  if (netns != own_netns_ && netns != 0) netns_path = proc_.namespace_path(reader_pid, "net");
  NetnsFacts facts = query_network_namespace(netns_path);
  if (!facts.unix_sockets) {
    limitation(fmt::format("unix socket peers unknown: {}", facts.unix_sockets.error()));
  } else {
    for (const auto& d : *facts.unix_sockets) {
      auto it = ns.by_inode.find(d.inode);
      if (it == ns.by_inode.end()) {
        SocketInfo s;
        s.inode = d.inode;
        s.netns = netns;
        s.family = "unix";
        s.local = d.name;
        s.state = d.state == 10  ? "LISTEN"
                  : d.state == 1 ? "CONNECTED"
                  : d.state == 2 ? "CONNECTING"
                                 : "UNCONNECTED";
        s.remote_is_local_host = true;
        it = ns.by_inode.emplace(d.inode, std::move(s)).first;
      }
      it->second.peer_inode = d.peer_inode;
      if (d.has_queues) {
        it->second.rx_queue = d.rx_queue;
        it->second.tx_queue = d.tx_queue;
      }
    }
    // A connection in a listener's accept queue: the listener's holder will
    // accept it (until then its other end is held by no fd).
    for (const auto& d : *facts.unix_sockets)
      for (uint64_t client : d.pending_clients)
        if (auto c = ns.by_inode.find(client); c != ns.by_inode.end())
          c->second.pending_on_listener = d.inode;
    // The remote end of a unix socket is named by its peer.
    for (auto& [inode, s] : ns.by_inode) {
      if (s.family != "unix" || !s.peer_inode) continue;
      auto peer = ns.by_inode.find(s.peer_inode);
      if (peer != ns.by_inode.end()) s.remote = peer->second.local;
    }
  }
  // The interfaces' addresses, from netlink (inside the namespace) and from
  // its /proc/PID/net/{if_inet6,fib_trie} (which need no setns).
  auto add_addresses = [this](const std::vector<std::string>& addresses) {
    for (const auto& a : addresses) {
      if (std::find(snap_.local_addresses.begin(), snap_.local_addresses.end(), a) ==
          snap_.local_addresses.end())
        snap_.local_addresses.push_back(a);
    }
  };
  if (facts.addresses) add_addresses(*facts.addresses);
  if (auto from_proc = proc_.host_addresses(reader_pid)) add_addresses(*from_proc);
}

std::vector<uint64_t> Collector::udp_receivers(const SocketInfo& s) const {
  std::vector<uint64_t> out;
  if (s.family.rfind("udp", 0) != 0 || s.peer_inode) return out;
  auto remote = procfs::parse_endpoint(s.remote);
  if (!remote || remote->port == 0 || !procfs::is_this_host_address(remote->ip, snap_.local_addresses))
    return out;
  auto ns = netns_sockets_.find(s.netns);
  if (ns == netns_sockets_.end()) return out;
  auto [begin, end] = ns->second.udp_bound.equal_range(remote->port);
  for (auto it = begin; it != end && out.size() < kMaxPeers; ++it) {
    const auto& [ip, inode] = it->second;
    if (inode != s.inode && (ip == remote->ip || procfs::is_unspecified_address(ip))) out.push_back(inode);
  }
  return out;
}

const SocketInfo* Collector::find_socket(uint64_t inode) const {
  for (const auto& [netns, ns] : netns_sockets_) {
    auto it = ns.by_inode.find(inode);
    if (it != ns.by_inode.end()) return &it->second;
  }
  return nullptr;
}

void Collector::find_peers() {
  std::unordered_set<uint64_t> pipe_inodes, socket_inodes, eventfd_ids;
  std::set<int> awaited_exits;  // processes outside the job a pidfd waits for
  bool want_fuse_daemon = false;
  std::unordered_set<int> in_snapshot;
  for (const auto& p : snap_.processes) in_snapshot.insert(p.pid);

  auto want_socket = [&](uint64_t inode) {
    socket_inodes.insert(inode);
    const SocketInfo* s = find_socket(inode);
    if (!s) return;
    if (s->peer_inode) {
      socket_inodes.insert(s->peer_inode);
      return;
    }
    // A datagram to a server on this host (a resolver on 127.0.0.53:53):
    // whoever holds the socket bound there answers it.
    for (uint64_t receiver : udp_receivers(*s)) socket_inodes.insert(receiver);
    // A TCP connection not accepted yet: the listener on the remote port
    // holds the other end as far as anyone can tell.
    if (s->family.rfind("tcp", 0) == 0 && s->state != "LISTEN") {
      auto colon = s->remote.rfind(':');
      uint16_t port = 0;
      if (colon != std::string::npos) port = static_cast<uint16_t>(std::atoi(s->remote.c_str() + colon + 1));
      auto ns = netns_sockets_.find(s->netns);
      if (port && ns != netns_sockets_.end()) {
        auto [begin, end] = ns->second.tcp_listeners.equal_range(port);
        for (auto it = begin; it != end; ++it) socket_inodes.insert(it->second);
      }
    }
  };
  // Only the objects a thread of the job waits on pull in outside processes:
  // the shell or tee sharing the job's stdout is not a peer unless the job is
  // blocked writing to it.
  for (const auto& p : snap_.processes) {
    for (const auto& t : p.threads) {
      for (int fd : waited_fds(p, t)) {
        auto f = std::find_if(p.fds.begin(), p.fds.end(), [fd](const FdEntry& e) { return e.fd == fd; });
        if (f == p.fds.end()) continue;
        if (f->kind == FdKind::Socket)
          want_socket(f->inode);
        else if (f->kind == FdKind::Pipe && !f->dev_major && !f->dev_minor)
          pipe_inodes.insert(f->inode);
        else if (f->kind == FdKind::EventFd && f->eventfd_id)
          eventfd_ids.insert(*f->eventfd_id);
        else if (f->kind == FdKind::PidFd && f->pidfd_pid && *f->pidfd_pid > 0 &&
                 !in_snapshot.count(*f->pidfd_pid))
          awaited_exits.insert(*f->pidfd_pid);
      }
    }
    // A wait on a FUSE mount is answered by the daemon holding /dev/fuse.
    for (const auto& m : p.mounts)
      if (procfs::is_fuse_fstype(m.fstype)) want_fuse_daemon = true;
  }
  std::vector<int> peers(awaited_exits.begin(), awaited_exits.end());
  for (int pid : peers) in_snapshot.insert(pid);
  const bool fds_wanted = !pipe_inodes.empty() || !socket_inodes.empty() || !eventfd_ids.empty() ||
                          !fifos_.empty() || want_fuse_daemon;
  // One pass over every fd on the host, matching only those inodes.
  if (fds_wanted) {
    std::vector<int> holders =
        host_processes_holding(in_snapshot, kMaxPeers + 1, [&](int pid, int fd, const std::string& link) {
          auto c = procfs::classify_fd_link(link);
          if (c.kind == FdKind::Pipe) return pipe_inodes.count(c.inode) > 0;
          if (c.kind == FdKind::Socket) return socket_inodes.count(c.inode) > 0;
          if (c.kind == FdKind::Device) return want_fuse_daemon && c.path == "/dev/fuse";
          if (c.kind == FdKind::File) {  // a FIFO the job waits on, by its path, then by stat
            auto known = fifos_.find(link);
            if (known == fifos_.end()) return false;
            auto st = proc_.fd_stat(pid, fd);
            return st && st->fifo && st->id == known->second;
          }
          if (c.kind == FdKind::EventFd && !eventfd_ids.empty()) {
            auto info = proc_.fdinfo(pid, fd);
            return info && info->eventfd_id && eventfd_ids.count(*info->eventfd_id) > 0;
          }
          return false;
        });
    peers.insert(peers.end(), holders.begin(), holders.end());
  }
  if (peers.empty()) return;
  if (peers.size() > kMaxPeers) {
    limitation(
        fmt::format("more than {} peer processes hold the job's pipes and sockets; only the first {} kept",
                    kMaxPeers, kMaxPeers));
    peers.resize(kMaxPeers);
  }
  // Peers are one level deep: their own waits do not pull in more processes.
  for (int pid : peers) {
    auto p = collect_process(pid, ProcessRole::Peer);
    if (!p) continue;
    load_network_namespace(p->netns, proc_id(pid));
    snap_.processes.push_back(std::move(*p));
  }
  debug(fmt::format("{} peer process(es)", peers.size()));
}

std::vector<int> Collector::host_processes_holding(
    const std::unordered_set<int>& skip, size_t at_most,
    const std::function<bool(int pid, int fd, const std::string& link)>& wanted) const {
  const int self = getpid();
  std::vector<int> out;
  for (int pid : all_pids_) {
    if (out.size() >= at_most) break;
    if (skip.count(pid) || pid == self) continue;
    auto st = stats_.find(pid);
    if (st == stats_.end() || st->second.is_kernel_thread()) continue;
    auto fds = proc_.fds(pid);
    if (!fds) continue;
    bool holds = false;
    for (size_t i = 0; i < fds->size() && i < kMaxFdsPerProcess && !holds; ++i) {
      auto link = proc_.fd_link(pid, (*fds)[i]);
      holds = link && wanted(pid, (*fds)[i], *link);
    }
    if (holds) out.push_back(pid);
  }
  return out;
}

void Collector::assemble_sockets() {
  std::set<uint64_t> keep;
  for (const auto& p : snap_.processes) {
    for (const auto& f : p.fds) {
      if (f.kind == FdKind::Socket) keep.insert(f.inode);
    }
  }
  std::set<uint64_t> with_peers = keep;
  for (uint64_t inode : keep) {
    const SocketInfo* s = find_socket(inode);
    if (!s) continue;
    if (s->peer_inode) with_peers.insert(s->peer_inode);
    // The servers a UDP socket sends to, held by someone or not: the graph
    // tells "nobody listens there" from "a socket nobody visible holds".
    for (uint64_t receiver : udp_receivers(*s)) with_peers.insert(receiver);
  }
  for (uint64_t inode : with_peers) {
    for (const auto& [netns, ns] : netns_sockets_) {
      auto it = ns.by_inode.find(inode);
      if (it == ns.by_inode.end()) continue;
      SocketInfo s = it->second;
      if (s.family != "unix") {
        auto ip = ns.remote_ip.find(inode);
        std::string remote = ip == ns.remote_ip.end() ? "" : ip->second;
        s.remote_is_local_host = procfs::is_this_host_address(remote, snap_.local_addresses);
      }
      snap_.sockets.push_back(std::move(s));
      break;
    }
  }
}

}  // namespace hangtrace::collector_pass
