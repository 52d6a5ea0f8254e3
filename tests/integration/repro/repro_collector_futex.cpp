// A child waits on a futex in a MAP_SHARED|MAP_ANONYMOUS page inherited
// across fork; nobody wakes it.
//   READY parent=PID child=PID uaddr=0xADDR value=0xVALUE
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>

int main() {
  constexpr uint32_t kValue = 0x1234abcd;
  void* page = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (page == MAP_FAILED) return 1;
  auto* word = reinterpret_cast<uint32_t*>(static_cast<char*>(page) + 64);
  *word = kValue;
  pid_t child = fork();
  if (child < 0) return 1;
  if (child == 0) {
    // Not FUTEX_PRIVATE: the page is shared with the parent.
    for (;;) syscall(SYS_futex, word, FUTEX_WAIT, kValue, nullptr, nullptr, 0);
  }
  std::printf("READY parent=%d child=%d uaddr=%#lx value=%#x\n", getpid(), child,
              static_cast<unsigned long>(reinterpret_cast<uintptr_t>(word)), kValue);
  std::fflush(stdout);
  for (;;) pause();
}
