// Records a seed for python_walker_fuzz: walks the Python stacks of a live
// process with every read noted (RecordingMemory) and writes the image.
//
//   record_python_image PID OUT
//
// tests/fuzz/README.md says how the committed seeds were made.
#include <cstdio>
#include <fstream>
#include <string>

#include "procmem.h"
#include "python_image.h"
#include "python_offsets.h"
#include "python_runtime.h"
#include "python_stacks.h"

using namespace hangtrace;

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: record_python_image PID OUT\n");
    return 2;
  }
  int pid = std::atoi(argv[1]);
  procfs::ProcFs fs;
  auto loc = python::find_runtime(fs, pid, true);
  if (!loc) {
    std::fprintf(stderr, "failed to find the interpreter: %s\n", loc.error().c_str());
    return 1;
  }
  fuzz::PythonImage image;
  image.major = loc->major;
  image.minor = loc->minor;
  image.runtime = loc->runtime;
  fuzz::RecordingMemory mem(pid, image);
  std::optional<python::PyOffsets> offsets = python::offsets_for(loc->major, loc->minor);
  if (!offsets) {
    auto debug = python::offsets_from_debug(mem, loc->runtime, loc->major, loc->minor);
    if (!debug) {
      std::fprintf(stderr, "failed to read the layout: %s\n", debug.error().c_str());
      return 1;
    }
    offsets = std::move(*debug);
  }
  ProcessInfo p;
  p.pid = pid;
  auto tids = fs.tids(pid);
  if (!tids) {
    std::fprintf(stderr, "failed to list threads: %s\n", tids.error().c_str());
    return 1;
  }
  for (int tid : *tids) {
    ThreadInfo t;
    t.tid = tid;
    p.threads.push_back(t);
    image.tids.push_back(tid);
  }
  std::string error = walk_python_threads(p, mem, *offsets, loc->runtime);
  size_t frames = 0;
  for (const auto& t : p.threads) frames += t.python_stack.size();
  std::ofstream(argv[2], std::ios::binary) << image.serialize();
  std::printf("CPython %d.%d: %zu threads, %zu frames, %zu regions%s%s\n", loc->major, loc->minor,
              p.threads.size(), frames, image.regions.size(), error.empty() ? "" : "; ", error.c_str());
  return frames ? 0 : 1;
}
