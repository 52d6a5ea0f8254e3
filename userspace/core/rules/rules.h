// The rule families: each file under userspace/core/rules/ makes the
// findings of a few kinds (finding_kinds.h) from one RuleContext (context.h).
// diagnose.cpp runs them in the order listed there and orders the result
// (verdict.cpp). Internal to hangtrace_core.
//
// A new kind: its X(...) line in finding_kinds.h, one function here, in the
// file of its family (or a new family file), and its line in the rule list
// of diagnose.cpp.
#pragma once

#include <optional>
#include <vector>

#include "context.h"

namespace hangtrace::rules {

// deadlock.cpp: which threads can never move on, and deadlock-cycle.
Knot find_knot(const WaitGraph& graph);
std::vector<Finding> deadlock_cycle_findings(const RuleContext& ctx);

// asyncio.cpp (CPython 3.14+ tasks): asyncio-cycle, asyncio-orphan-future,
// asyncio-loop-blocked.
std::vector<Finding> asyncio_findings(const RuleContext& ctx);

// pool.cpp: pool-self-wait (a thread pool whose tasks wait on the same pool).
std::vector<Finding> pool_self_wait_findings(const RuleContext& ctx);

// terminal.cpp: waits nothing alive can end: orphaned-lock, dead-peer (not
// for a process pool-self-wait explains: it runs after that rule).
std::vector<Finding> terminal_findings(const RuleContext& ctx);

// stopped.cpp: stopped (a process stopped by a signal or a tracer).
std::vector<Finding> stopped_findings(const RuleContext& ctx);

// gil.cpp: gil-held (a thread blocked while it holds its process's GIL).
std::vector<Finding> gil_held_findings(const RuleContext& ctx);

// io_stuck.cpp: io-stuck (a read or write stuck inside a filesystem).
std::vector<Finding> io_stuck_findings(const RuleContext& ctx);

// network.cpp: network-wait, with what the live window saw of the connection.
std::vector<Finding> network_wait_findings(const RuleContext& ctx);
// "peer 300 (python3), which reads on socket:[5]; ...": the processes
// holding the other end of a socket, and what each waits on.
std::string peer_labels(const RuleContext& ctx, const std::vector<int>& pids);

// dns.cpp: dns-wait (a name lookup that has not come back), and whether a
// wait is one (network-wait leaves those to it).
std::vector<Finding> dns_wait_findings(const RuleContext& ctx);
bool is_dns_lookup(const RuleContext& ctx, const ThreadWait& w);

// stalled.cpp: no-progress (the floor: a main thread that has not moved for
// --stall-after, nothing it waits on moving, that no other finding explains;
// it runs after every other host rule), and what the verdict says of a job
// that made progress.
std::vector<Finding> no_progress_findings(const RuleContext& ctx);
std::string progress_seen(const RuleContext& ctx);

// resources.cpp: shm-exhausted; process-killed and memory-growth (live only).
std::vector<Finding> shm_exhausted_findings(const RuleContext& ctx);
std::vector<Finding> process_killed_findings(const RuleContext& ctx);
// kernel_deaths.cpp: process-killed from the kernel log (/dev/kmsg): deaths
// before hangtrace attached, joined to the job by pid or memory cgroup.
std::vector<Finding> kernel_log_death_findings(const RuleContext& ctx);
std::vector<Finding> memory_growth_findings(const RuleContext& ctx);

// slow.cpp (live): slow, not frozen -- data-starved, io-bound,
// lock-contention, collective-skew, gpu-idle, from the stall profile.
std::vector<Finding> slow_job_findings(const RuleContext& ctx);
bool is_slow_job_kind(FindingKind k);

// person.cpp: waits-for-input (a thread reading a terminal, or stdin inside
// a debugger: a person must act).
std::vector<Finding> person_input_findings(const RuleContext& ctx);

// rendezvous.cpp: rendezvous-wait (a rank still joining its process group).
std::vector<Finding> rendezvous_findings(const RuleContext& ctx);

// collective.cpp: collective-wait, collective-mismatch. gpu.cpp: gpu-wait,
// gpu-starved. Both point into the host findings already in `ctx.findings`.
std::vector<Finding> collective_wait_findings(const RuleContext& ctx);
std::vector<Finding> gpu_findings(const RuleContext& ctx);

// progress.cpp, on the ordered findings: what the live window saw of the
// stuck threads of the first finding about waits, and when the job stopped
// making progress (the top finding's threads and the main thread's chain).
void add_live_evidence(const RuleContext& ctx, std::vector<Finding>& findings);
std::optional<ProgressStop> progress_stopped(const RuleContext& ctx, const Finding& top);

// verdict.cpp: findings in report order with their ids ("F1", ...), and the verdict.
void order_findings(std::vector<Finding>& findings);
void number_findings(std::vector<Finding>& findings);

// causes.cpp, on the ordered findings: each finding whose waits lead to the
// threads of another is moved after the root of its chain of causes, with
// caused_by naming that root; roots keep their order, the first is the verdict.
void group_by_cause(const RuleContext& ctx, std::vector<Finding>& findings);
// `progress` says why a job with no finding is not stalled (progress_seen).
Verdict verdict_for(const Snapshot& snap, const WaitGraph& graph, const std::vector<Finding>& findings,
                    const std::string& progress = "");

}  // namespace hangtrace::rules
