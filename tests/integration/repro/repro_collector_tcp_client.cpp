// Connects to 127.0.0.1:PORT (argv[1]) and blocks reading the connection.
//   READY fd=N
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  int s = socket(AF_INET, SOCK_STREAM, 0);
  if (s < 0) return 1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(std::atoi(argv[1])));
  if (connect(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) return 1;
  std::printf("READY fd=%d\n", s);
  std::fflush(stdout);
  char c;
  for (;;) (void)recv(s, &c, 1, 0);
}
