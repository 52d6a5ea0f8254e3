#include "netlink_diag.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/sock_diag.h>
#include <linux/unix_diag.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fmt/format.h>
#include <thread>

namespace hangtrace {

namespace {

Error errno_error(const std::string& what, int err) {
  return make_error(fmt::format("failed to {}: {}", what, std::strerror(err)));
}

struct FdCloser {
  int fd;
  ~FdCloser() {
    if (fd >= 0) close(fd);
  }
};

void parse_unix_diag_message(const nlmsghdr* header, std::vector<UnixDiagEntry>& out) {
  if (header->nlmsg_len < NLMSG_LENGTH(sizeof(unix_diag_msg))) return;
  const auto* msg = static_cast<const unix_diag_msg*>(NLMSG_DATA(header));
  UnixDiagEntry entry;
  entry.inode = msg->udiag_ino;
  entry.type = msg->udiag_type;
  entry.state = msg->udiag_state;
  int attr_len = static_cast<int>(header->nlmsg_len - NLMSG_LENGTH(sizeof(*msg)));
  // The attributes follow the message, each aligned to 4 bytes.
  auto* attr =
      reinterpret_cast<const rtattr*>(reinterpret_cast<const char*>(msg) + NLMSG_ALIGN(sizeof(*msg)));
  for (; RTA_OK(attr, attr_len); attr = RTA_NEXT(attr, attr_len)) {
    const void* payload = RTA_DATA(attr);
    size_t payload_len = RTA_PAYLOAD(attr);
    switch (attr->rta_type) {
      case UNIX_DIAG_NAME: {
        std::string name(static_cast<const char*>(payload), payload_len);
        if (!name.empty() && name[0] == '\0') {
          // Abstract names may hold NULs anywhere; /proc/net/unix shows them as '@'.
          std::replace(name.begin(), name.end(), '\0', '@');
        } else {
          name = name.c_str();  // a path: up to the first NUL
        }
        entry.name = name;
        break;
      }
      case UNIX_DIAG_PEER:
        if (payload_len >= sizeof(uint32_t)) {
          uint32_t peer;
          std::memcpy(&peer, payload, sizeof peer);
          entry.peer_inode = peer;
        }
        break;
      case UNIX_DIAG_ICONS:
        for (size_t at = 0;
             at + sizeof(uint32_t) <= payload_len && entry.pending_clients.size() < kMaxPendingConnections;
             at += sizeof(uint32_t)) {
          uint32_t client;
          std::memcpy(&client, static_cast<const char*>(payload) + at, sizeof client);
          if (client) entry.pending_clients.push_back(client);
        }
        break;
      case UNIX_DIAG_RQLEN:
        if (payload_len >= sizeof(unix_diag_rqlen)) {
          unix_diag_rqlen q;
          std::memcpy(&q, payload, sizeof q);
          entry.rx_queue = q.udiag_rqueue;
          entry.tx_queue = q.udiag_wqueue;
          entry.has_queues = true;
        }
        break;
      default:
        break;
    }
  }
  out.push_back(std::move(entry));
}

}  // namespace

Result<std::vector<UnixDiagEntry>> unix_diag_dump() {
  int fd = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
  if (fd < 0) return errno_error("open a NETLINK_SOCK_DIAG socket", errno);
  FdCloser closer{fd};
  // A kernel that never answers must not hang the snapshot.
  timeval receive_timeout{2, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &receive_timeout, sizeof receive_timeout);

  struct {
    nlmsghdr header;
    unix_diag_req request;
  } message{};
  message.header.nlmsg_len = sizeof message;
  message.header.nlmsg_type = SOCK_DIAG_BY_FAMILY;
  message.header.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
  message.header.nlmsg_seq = 1;
  message.request.sdiag_family = AF_UNIX;
  message.request.udiag_states = ~0u;
  message.request.udiag_show = UDIAG_SHOW_NAME | UDIAG_SHOW_PEER | UDIAG_SHOW_RQLEN | UDIAG_SHOW_ICONS;
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  if (sendto(fd, &message, sizeof message, 0, reinterpret_cast<sockaddr*>(&kernel), sizeof kernel) < 0)
    return errno_error("send the unix sock_diag request", errno);

  std::vector<UnixDiagEntry> out;
  alignas(nlmsghdr) char buffer[32768];
  // Each datagram carries many sockets; the bound only stops a runaway loop.
  constexpr int kMaxDatagrams = 1 << 20;
  for (int datagram = 0; datagram < kMaxDatagrams; ++datagram) {
    ssize_t n = recv(fd, buffer, sizeof buffer, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno_error("receive the unix sock_diag dump", errno);
    }
    if (n == 0) return make_error("failed to receive the unix sock_diag dump: connection closed");
    int len = static_cast<int>(n);
    for (auto* header = reinterpret_cast<nlmsghdr*>(buffer); NLMSG_OK(header, len);
         header = NLMSG_NEXT(header, len)) {
      if (header->nlmsg_type == NLMSG_DONE) return out;
      if (header->nlmsg_type == NLMSG_ERROR) {
        const auto* err = static_cast<const nlmsgerr*>(NLMSG_DATA(header));
        int code = header->nlmsg_len >= NLMSG_LENGTH(sizeof(nlmsgerr)) ? -err->error : EPROTO;
        return errno_error("dump unix sockets with sock_diag", code);
      }
      if (header->nlmsg_type == SOCK_DIAG_BY_FAMILY) parse_unix_diag_message(header, out);
    }
  }
  return make_error("failed to receive the unix sock_diag dump: no end marker");
}

Result<std::vector<std::string>> interface_addresses() {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return errno_error("list interface addresses", errno);
  std::vector<std::string> out;
  for (ifaddrs* it = list; it; it = it->ifa_next) {
    if (!it->ifa_addr) continue;
    char text[INET6_ADDRSTRLEN] = {};
    if (it->ifa_addr->sa_family == AF_INET) {
      inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(it->ifa_addr)->sin_addr, text, sizeof text);
    } else if (it->ifa_addr->sa_family == AF_INET6) {
      inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(it->ifa_addr)->sin6_addr, text, sizeof text);
    } else {
      continue;
    }
    if (text[0] && std::find(out.begin(), out.end(), text) == out.end()) out.emplace_back(text);
  }
  freeifaddrs(list);
  return out;
}

NetnsFacts query_network_namespace(const std::string& netns_path) {
  NetnsFacts facts;
  if (netns_path.empty()) {
    facts.unix_sockets = unix_diag_dump();
    facts.addresses = interface_addresses();
    return facts;
  }
  // setns(CLONE_NEWNET) changes only the calling thread, and this thread
  // ends right after, so nothing else in hangtrace ever sees the namespace.
  std::thread worker([&facts, &netns_path] {
    int fd = open(netns_path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      facts.unix_sockets = errno_error("open " + netns_path, errno);
      facts.addresses = make_error(facts.unix_sockets.error());
      return;
    }
    int rc = setns(fd, CLONE_NEWNET);
    int err = errno;
    close(fd);
    if (rc != 0) {
      facts.unix_sockets = errno_error("enter the network namespace " + netns_path, err);
      facts.addresses = make_error(facts.unix_sockets.error());
      return;
    }
    facts.unix_sockets = unix_diag_dump();
    facts.addresses = interface_addresses();
  });
  worker.join();
  return facts;
}

}  // namespace hangtrace
