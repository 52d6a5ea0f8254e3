// Who could end a wait: the releasers an object names one by one and the
// processes any of whose live threads could (analysis.h's ReleaserProcess),
// counted, looked up and walked without listing a process's threads once per
// object.
#include <algorithm>
#include <climits>

#include "hangtrace/analysis.h"

namespace hangtrace {

namespace {

const std::vector<int>* live_threads_of(const WaitGraph& g, int pid) {
  auto it = g.live_threads.find(pid);
  return it == g.live_threads.end() ? nullptr : &it->second;
}

bool sorted_contains(const std::vector<int>& v, int x) { return std::binary_search(v.begin(), v.end(), x); }

int pid_of(const WaitGraph& g, int tid) {
  auto it = g.tid_to_pid.find(tid);
  return it == g.tid_to_pid.end() ? tid : it->second;
}

}  // namespace

size_t releaser_count(const WaitObject& o) {
  size_t n = o.releasers.size();
  for (const auto& p : o.releaser_processes) n += p.threads;
  return n;
}

bool is_releaser(const WaitGraph& g, const WaitObject& o, int tid) {
  if (sorted_contains(o.releasers, tid)) return true;
  const int pid = pid_of(g, tid);
  for (const auto& p : o.releaser_processes) {
    if (p.pid != pid) continue;
    const std::vector<int>* live = live_threads_of(g, pid);
    return live && sorted_contains(*live, tid) && !sorted_contains(p.except, tid);
  }
  return false;
}

std::optional<int> first_releaser(const WaitGraph& g, const WaitObject& o) {
  return ReleaserCursor(g, {&o}).next();
}

std::vector<int> releasers_of(const WaitGraph& g, const WaitObject& o) {
  std::vector<int> out;
  out.reserve(releaser_count(o));
  ReleaserCursor cursor(g, {&o});
  while (auto r = cursor.next()) out.push_back(*r);
  return out;
}

std::vector<int> WaitGraph::depends_on(int tid) const {
  std::vector<int> out;
  ReleaserCursor cursor(*this, tid);
  while (auto r = cursor.next()) out.push_back(*r);
  return out;
}

// ---- ReleaserCursor -------------------------------------------------------------
ReleaserCursor::ReleaserCursor(const WaitGraph& g, const std::vector<const WaitObject*>& objects,
                               int skip_tid)
    : skip_(skip_tid) {
  for (const WaitObject* o : objects) add(g, *o);
}

ReleaserCursor::ReleaserCursor(const WaitGraph& g, int tid) : skip_(tid) {
  auto it = g.threads.find(tid);
  if (it == g.threads.end()) return;
  for (const auto& id : it->second.objects) {
    auto o = g.objects.find(id);
    if (o != g.objects.end()) add(g, o->second);
  }
}

void ReleaserCursor::add(const WaitGraph& g, const WaitObject& o) {
  if (!o.releasers.empty())
    ranges_.push_back({o.releasers.data(), o.releasers.data() + o.releasers.size(), nullptr, nullptr});
  for (const auto& p : o.releaser_processes) {
    const std::vector<int>* live = live_threads_of(g, p.pid);
    if (!live || live->empty()) continue;
    ranges_.push_back(
        {live->data(), live->data() + live->size(), p.except.data(), p.except.data() + p.except.size()});
  }
}

std::optional<int> ReleaserCursor::next() {
  for (;;) {
    int best = INT_MAX;
    bool any = false;
    for (auto& r : ranges_) {
      // Both ascending: step over the excepted tids as they come.
      while (r.at != r.end) {
        while (r.except != r.except_end && *r.except < *r.at) ++r.except;
        if (r.except == r.except_end || *r.except != *r.at) break;
        ++r.at;
      }
      if (r.at != r.end) {
        best = std::min(best, *r.at);
        any = true;
      }
    }
    if (!any) return std::nullopt;
    for (auto& r : ranges_)
      if (r.at != r.end && *r.at == best) ++r.at;
    if (best != skip_) return best;
  }
}

// ---- ReleaserWalk ---------------------------------------------------------------
ReleaserWalk::ReleaserWalk(const WaitGraph& g, TidFilter member) : g_(g), member_(std::move(member)) {}

std::set<int>& ReleaserWalk::unreached_of(int pid) {
  auto [it, inserted] = unreached_.try_emplace(pid);
  if (inserted)
    if (const std::vector<int>* live = live_threads_of(g_, pid))
      for (int tid : *live)
        if (!reached_.count(tid) && (!member_ || member_(tid))) it->second.insert(it->second.end(), tid);
  return it->second;
}

void ReleaserWalk::mark(int tid) {
  if (!reached_.insert(tid).second) return;
  auto it = unreached_.find(pid_of(g_, tid));
  if (it != unreached_.end()) it->second.erase(tid);
}

std::vector<int> ReleaserWalk::expand(const WaitObject& o, const TidFilter& pid_filter) {
  std::vector<int> out;
  if (!o.releasers.empty() && !done_.count(&o.releasers)) {
    for (int r : o.releasers)
      if ((!pid_filter || pid_filter(pid_of(g_, r))) && !reached_.count(r) && (!member_ || member_(r)))
        out.push_back(r);
    if (!pid_filter) done_.insert(&o.releasers);
  }
  for (const auto& p : o.releaser_processes) {
    if (done_.count(&p) || (pid_filter && !pid_filter(p.pid))) continue;
    // Once expanded an entry reaches nothing new: every thread it stands
    // for has been reached.
    done_.insert(&p);
    std::set<int>& unreached = unreached_of(p.pid);
    for (int tid : unreached)
      if (!sorted_contains(p.except, tid)) out.push_back(tid);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  for (int r : out) mark(r);
  return out;
}

}  // namespace hangtrace
