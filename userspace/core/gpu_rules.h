// Findings that pair the GPU side of a job with its host wait graph:
// gpu-starved, gpu-wait (gpu_rules.cpp) and collective-wait
// (collective_rules.cpp). Internal to hangtrace_core: the analyzer in
// rules.cpp hands them what they need of its state.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "hangtrace/analysis.h"

namespace hangtrace {

struct RuleContext {
  const Snapshot& snap;
  const AnalysisOptions& opt;
  const LiveObservation* live;  // null: snapshot only
  const WaitGraph& graph;
  // "main 212 (python)", "thread 215 (pt_autograd_0) of main 212"
  std::function<std::string(int tid)> thread_label;
  // The thread is stuck for good: nothing alive can end its wait.
  std::function<bool(int tid)> stuck;
  // What `tid` waits on, down to the cause: from a finding whose chain passes
  // through it when there is one, else its own wait and who can end it.
  std::function<std::vector<ChainStep>(int tid)> chain_from;
  // The host findings made before these (to point into).
  const std::vector<Finding>& findings;
};

// A host thread waiting for the GPU: a CUDA synchronize (or a synchronous
// copy) seen in progress by the uprobes, or in the thread's stacks.
struct HostGpuWait {
  int pid = 0, tid = 0;
  std::string call;     // "cuCtxSynchronize", "torch.cuda.synchronize"
  double waited_s = 0;  // so far, at the end of the observation
  std::string source;   // "uprobe", "native stack", "python stack"
  bool certain = false;
};

// Every host thread waiting for the GPU, by tid.
std::vector<HostGpuWait> host_gpu_waits(const RuleContext& ctx);

std::vector<Finding> gpu_findings(const RuleContext& ctx);
std::vector<Finding> collective_findings(const RuleContext& ctx);

}  // namespace hangtrace
