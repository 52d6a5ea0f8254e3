// The CPython walker (walk_python_threads) over a fuzzed memory image: every
// supported version's layout (3.8-3.12 from the offset tables, 3.13+ from the
// _Py_DebugOffsets the image itself holds), read through the MemoryReader
// interface the live walker uses. Seeds: real interpreters' memory as the
// walker read it (record_python_image, tests/fuzz/README.md).
#include <cstddef>
#include <cstdint>

#include "python_image.h"
#include "python_offsets.h"
#include "python_stacks.h"

using namespace hangtrace;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto image = fuzz::PythonImage::parse(data, size);
  if (!image || image->major != 3) return 0;
  fuzz::ImageMemory mem(*image);
  std::optional<python::PyOffsets> offsets = python::offsets_for(3, image->minor);
  if (!offsets && image->minor >= 13) {
    auto debug = python::offsets_from_debug(mem, image->runtime, 3, image->minor);
    if (!debug) return 0;
    offsets = std::move(*debug);
  }
  if (!offsets) return 0;
  ProcessInfo p;
  p.pid = image->tids.empty() ? 1 : image->tids.front();
  for (int tid : image->tids) {
    ThreadInfo t;
    t.tid = tid;
    p.threads.push_back(t);
  }
  walk_python_threads(p, mem, *offsets, image->runtime);
  // Bounded output: the walker's own limits, whatever the image says.
  for (const ThreadInfo& t : p.threads) {
    if (t.python_stack.size() > 256) __builtin_trap();
    for (const UserFrame& f : t.python_stack)
      if (f.function.size() > 4096 || f.file.size() > 4096) __builtin_trap();
  }
  return 0;
}
