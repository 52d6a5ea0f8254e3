// Lookups in a Snapshot (model.h).
#include "hangtrace/model.h"

namespace hangtrace {

const ThreadInfo* ProcessInfo::thread(int tid) const {
  for (const auto& t : threads)
    if (t.tid == tid) return &t;
  return nullptr;
}

const ProcessInfo* Snapshot::process(int pid) const {
  for (const auto& p : processes)
    if (p.pid == pid) return &p;
  return nullptr;
}

const SocketInfo* Snapshot::socket(uint64_t inode) const {
  for (const auto& s : sockets)
    if (s.inode == inode) return &s;
  return nullptr;
}

}  // namespace hangtrace
