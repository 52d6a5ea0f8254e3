// /dev/shm segments the way torch uses them: one named and mapped
// (1 MiB, written so it is allocated), one mapped and then unlinked (64 KiB).
//   READY pid=PID name=NAME
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>

namespace {
void* map_segment(const std::string& path, size_t size) {
  int fd = open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
  if (fd < 0 || ftruncate(fd, static_cast<off_t>(size)) != 0) return nullptr;
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) return nullptr;
  std::memset(p, 1, size);
  return p;
}
}  // namespace

int main() {
  std::string name = "hangtrace_test_" + std::to_string(getpid());
  std::string named = "/dev/shm/" + name, unlinked = named + "_unlinked";
  if (!map_segment(named, 1 << 20) || !map_segment(unlinked, 64 << 10)) return 1;
  unlink(unlinked.c_str());
  std::printf("READY pid=%d name=%s\n", getpid(), name.c_str());
  std::fflush(stdout);
  // The named segment outlives a SIGKILL; the test removes it.
  for (;;) pause();
}
