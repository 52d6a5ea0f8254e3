// A TCP server on 127.0.0.1 (ephemeral port) that accepts one connection and
// then blocks reading it; the client (repro_collector_tcp_client) does the same.
//   READY port=N
//   ACCEPTED fd=N
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>

int main() {
  int listener = socket(AF_INET, SOCK_STREAM, 0);
  if (listener < 0) return 1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  if (bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) return 1;
  if (listen(listener, 4) != 0) return 1;
  socklen_t len = sizeof addr;
  getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len);
  std::printf("READY port=%d\n", ntohs(addr.sin_port));
  std::fflush(stdout);
  int conn = accept(listener, nullptr, nullptr);
  if (conn < 0) return 1;
  std::printf("ACCEPTED fd=%d\n", conn);
  std::fflush(stdout);
  char c;
  for (;;) (void)recv(conn, &c, 1, 0);
}
