// A TCP client stuck in connect() to a server that never answers, with the
// kernel retransmitting its SYN once a second -- deterministically, and
// without touching the host's network:
//  - it moves into a private network namespace (root: unshare(CLONE_NEWNET))
//    and brings its `lo` up;
//  - a host route sends 10.255.0.1 (not a local address) out of `lo`: the
//    SYN loops back, is not for this host, and nothing forwards it, so no
//    SYN-ACK or RST ever comes;
//  - in that namespace only, tcp_syn_linear_timeouts (Linux >= 6.7) keeps
//    the SYN retransmit timeout at 1 s instead of doubling it, and
//    TCP_SYNCNT 127 keeps connect() from giving up for about two minutes
//    (without the sysctl the retransmits come at 1, 3, 7, 15 ... s).
// It starts the connect (non-blocking, so the local port is known), prints
//   READY pid=PID port=LOCAL_PORT remote=10.255.0.1:4242
// and then waits in a blocking connect() on the same socket, as a training
// job waits for a rendezvous server that is gone.
#include <arpa/inet.h>
#include <fcntl.h>
#include <net/if.h>
#include <net/route.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace {

constexpr const char* kRemote = "10.255.0.1";
constexpr int kRemotePort = 4242;

int fail(const char* what) {
  std::fprintf(stderr, "repro_live_syn_retransmit: %s: %s\n", what, std::strerror(errno));
  return 2;
}

bool write_sysctl(const char* path, const char* value) {
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  bool ok = write(fd, value, std::strlen(value)) == static_cast<ssize_t>(std::strlen(value));
  close(fd);
  return ok;
}

}  // namespace

int main() {
  if (unshare(CLONE_NEWNET) != 0) return fail("unshare(CLONE_NEWNET)");
  int ctl = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (ctl < 0) return fail("socket");
  ifreq ifr{};
  std::strncpy(ifr.ifr_name, "lo", IFNAMSIZ - 1);
  if (ioctl(ctl, SIOCGIFFLAGS, &ifr) != 0) return fail("SIOCGIFFLAGS lo");
  ifr.ifr_flags |= IFF_UP;
  if (ioctl(ctl, SIOCSIFFLAGS, &ifr) != 0) return fail("SIOCSIFFLAGS lo up");

  rtentry rt{};
  auto* dst = reinterpret_cast<sockaddr_in*>(&rt.rt_dst);
  dst->sin_family = AF_INET;
  inet_pton(AF_INET, kRemote, &dst->sin_addr);
  auto* mask = reinterpret_cast<sockaddr_in*>(&rt.rt_genmask);
  mask->sin_family = AF_INET;
  mask->sin_addr.s_addr = htonl(0xffffffffu);
  rt.rt_flags = RTF_UP | RTF_HOST;
  char dev[] = "lo";
  rt.rt_dev = dev;
  if (ioctl(ctl, SIOCADDRT, &rt) != 0) return fail("SIOCADDRT 10.255.0.1/32 dev lo");
  close(ctl);

  // Best effort: older kernels lack the sysctl and back off exponentially.
  write_sysctl("/proc/sys/net/ipv4/tcp_syn_linear_timeouts", "127");

  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (s < 0) return fail("socket");
  int syncnt = 127;
  setsockopt(s, IPPROTO_TCP, TCP_SYNCNT, &syncnt, sizeof syncnt);
  // A source address (the route has none to offer; 0.0.0.0 would be shown).
  sockaddr_in from{};
  from.sin_family = AF_INET;
  from.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(s, reinterpret_cast<sockaddr*>(&from), sizeof from) != 0) return fail("bind 127.0.0.1");
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(kRemotePort);
  inet_pton(AF_INET, kRemote, &to.sin_addr);
  if (connect(s, reinterpret_cast<sockaddr*>(&to), sizeof to) == 0 || errno != EINPROGRESS)
    return fail("connect (expected EINPROGRESS)");
  sockaddr_in local{};
  socklen_t len = sizeof local;
  if (getsockname(s, reinterpret_cast<sockaddr*>(&local), &len) != 0) return fail("getsockname");
  std::printf("READY pid=%d port=%d remote=%s:%d\n", getpid(), ntohs(local.sin_port), kRemote, kRemotePort);
  std::fflush(stdout);

  // Blocking again: connect() on a socket in SYN_SENT waits for the outcome.
  if (fcntl(s, F_SETFL, 0) != 0) return fail("fcntl");
  int r = connect(s, reinterpret_cast<sockaddr*>(&to), sizeof to);
  std::printf("CONNECT %d %d\n", r, r == 0 ? 0 : errno);
  std::fflush(stdout);
  return 3;
}
