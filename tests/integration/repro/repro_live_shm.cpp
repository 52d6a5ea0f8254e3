// A /dev/shm producer in a Docker-sized tmpfs: its own mount namespace with a
// 1 MiB tmpfs on /dev/shm. Starts only after a line on stdin, so a tracer can
// attach first.
//   repro_live_shm sigbus     create /dev/shm/x, ftruncate 4 MiB, mmap it and
//                             write page by page: dies of SIGBUS past 1 MiB
//   repro_live_shm fallocate  posix_fallocate 4 MiB: ENOSPC; write 64 KiB
//                             chunks until write fails (ENOSPC); unlink
//   READY pid=PID
//   FALLOCATE <error number>   (fallocate mode)
//   WRITE <errno>
#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "sigbus";
  if (unshare(CLONE_NEWNS) != 0 || mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
      mount("tmpfs", "/dev/shm", "tmpfs", 0, "size=1m") != 0) {
    std::fprintf(stderr, "mount namespace with a 1 MiB /dev/shm: %s\n", std::strerror(errno));
    return 2;
  }
  std::printf("READY pid=%d\n", getpid());
  std::fflush(stdout);
  std::string line;
  std::getline(std::cin, line);

  const size_t size = 4 << 20;
  int fd = open("/dev/shm/x", O_RDWR | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) return 3;
  if (mode == "fallocate") {
    int err = posix_fallocate(fd, 0, size);
    std::printf("FALLOCATE %d\n", err);
    static char chunk[64 << 10];
    // Full chunks, maybe a short one, then the write that is refused.
    while (write(fd, chunk, sizeof chunk) > 0) {
    }
    std::printf("WRITE %d\n", errno);
    std::fflush(stdout);
    close(fd);
    unlink("/dev/shm/x");
    std::printf("DONE\n");
    std::fflush(stdout);
    std::getline(std::cin, line);
    return 0;
  }
  if (ftruncate(fd, size) != 0) return 4;
  auto* p = static_cast<volatile char*>(mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
  if (p == MAP_FAILED) return 5;
  std::printf("WRITING\n");
  std::fflush(stdout);
  // The page past the tmpfs size cannot be allocated: SIGBUS ends us here.
  for (size_t off = 0; off < size; off += 4096) p[off] = 1;
  return 6;  // only if the tmpfs had room after all
}
