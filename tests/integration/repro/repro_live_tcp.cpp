// A TCP server and client in one process on 127.0.0.1, run through one whole
// connection after a line on stdin: listen, connect, accept, one byte each
// way, client closes first, then the server side, then the listener.
//   READY pid=PID port=LISTEN_PORT
//   DONE client_port=PORT
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <string>

int main() {
  int l = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (l < 0 || bind(l, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      getsockname(l, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    return 2;
  }
  std::printf("READY pid=%d port=%d\n", getpid(), ntohs(a.sin_port));
  std::fflush(stdout);
  std::string line;
  std::getline(std::cin, line);

  // listen() after the tracer attached, so the LISTEN transition is seen.
  if (listen(l, 4) != 0) return 3;
  int c = socket(AF_INET, SOCK_STREAM, 0);
  if (c < 0 || connect(c, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return 4;
  int s = accept(l, nullptr, nullptr);
  if (s < 0) return 5;
  char b = 'x';
  if (write(c, &b, 1) != 1 || read(s, &b, 1) != 1 || write(s, &b, 1) != 1 || read(c, &b, 1) != 1) return 6;
  sockaddr_in ca{};
  len = sizeof ca;
  getsockname(c, reinterpret_cast<sockaddr*>(&ca), &len);
  close(c);
  // Wait for the client's FIN before closing our side: CLOSE_WAIT -> LAST_ACK.
  if (read(s, &b, 1) != 0) return 7;
  close(s);
  close(l);
  std::printf("DONE client_port=%d\n", ntohs(ca.sin_port));
  std::fflush(stdout);
  std::getline(std::cin, line);
  return 0;
}
