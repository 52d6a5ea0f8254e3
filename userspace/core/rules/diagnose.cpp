// diagnose(): the wait-for graph, the threads that can never move on, every
// rule family in turn (rules.h), then the findings in order and the verdict.
#include "rules.h"

namespace hangtrace {

namespace {

using Rule = std::vector<Finding> (*)(const rules::RuleContext&);

// The host rules, in the order their findings are made: findings of equal
// severity, confidence and priority are reported in this order.
constexpr Rule kHostRules[] = {
    rules::person_input_findings,      // waits-for-input
    rules::stopped_findings,           // stopped
    rules::gil_held_findings,          // gil-held
    rules::pool_self_wait_findings,    // pool-self-wait
    rules::io_stuck_findings,          // io-stuck
    rules::terminal_findings,          // orphaned-lock, dead-peer
    rules::deadlock_cycle_findings,    // deadlock-cycle
    rules::asyncio_findings,           // asyncio-cycle, asyncio-orphan-future, asyncio-loop-blocked
    rules::dns_wait_findings,          // dns-wait
    rules::network_wait_findings,      // network-wait
    rules::shm_exhausted_findings,     // shm-exhausted
    rules::process_killed_findings,    // process-killed (live)
    rules::kernel_log_death_findings,  // process-killed (the kernel log: before hangtrace attached)
    rules::memory_growth_findings,     // memory-growth (live)
    rules::slow_job_findings,  // data-starved, io-bound, lock-contention, collective-skew, gpu-idle (live)
};

// After the device rules too: the floor judges what no other finding covers.
constexpr Rule kFloorRules[] = {
    rules::no_progress_findings,  // no-progress
};

// The rules that pair the GPU side with the host: they point into the host
// findings, and see those, not each other's.
constexpr Rule kDeviceRules[] = {
    rules::rendezvous_findings,       // rendezvous-wait
    rules::collective_wait_findings,  // collective-wait, collective-mismatch
    rules::gpu_findings,              // gpu-wait, gpu-starved
};

void append(std::vector<Finding>& to, std::vector<Finding> from) {
  for (auto& f : from) to.push_back(std::move(f));
}

}  // namespace

Diagnosis diagnose(const Snapshot& snapshot, const AnalysisOptions& options, const LiveObservation* live) {
  Diagnosis d;
  d.graph = build_wait_graph(snapshot);
  if (live) d.profile = build_stall_profile(snapshot, *live);
  rules::RuleContext ctx{snapshot, options, live, d.graph, rules::find_knot(d.graph), {}};
  ctx.profile = &d.profile;
  d.deadlocked_tids.assign(ctx.knot.strict.begin(), ctx.knot.strict.end());
  for (int t : ctx.knot.lenient)
    if (!ctx.knot.strict.count(t)) d.probably_deadlocked_tids.push_back(t);

  for (Rule rule : kHostRules) append(ctx.findings, rule(ctx));
  std::vector<Finding> device;
  for (Rule rule : kDeviceRules) append(device, rule(ctx));
  append(ctx.findings, std::move(device));
  for (Rule rule : kFloorRules) append(ctx.findings, rule(ctx));

  d.findings = std::move(ctx.findings);
  rules::order_findings(d.findings);
  rules::group_by_cause(ctx, d.findings);
  if (live) rules::add_live_evidence(ctx, d.findings);
  d.verdict = rules::verdict_for(snapshot, d.graph, d.findings,
                                 d.findings.empty() ? rules::progress_seen(ctx) : std::string());
  if (d.verdict.status == "hang" || d.verdict.status == "suspect")
    d.progress_stopped = rules::progress_stopped(ctx, d.findings.front());
  return d;
}

int exit_status_for(const Diagnosis& d) {
  for (const auto& f : d.findings)
    if (f.severity == Severity::Critical) return 2;
  return 0;
}

}  // namespace hangtrace
