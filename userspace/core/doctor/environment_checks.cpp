// The environment checks: the NCCL and torch.distributed variables of a
// distributed job, CUDA_LAUNCH_BLOCKING, OMP_NUM_THREADS.
#include <fmt/format.h>

#include "hangtrace/collectives.h"
#include "internal.h"

namespace hangtrace::doctor::detail {
namespace {

bool truthy(const std::optional<std::string>& v) {
  return v && !v->empty() && *v != "0" && *v != "false" && *v != "False" && *v != "OFF" && *v != "off";
}

}  // namespace

void check_environment(const DoctorInputs& in, const Target* t,
                       const std::optional<std::string>& torch_version, std::vector<Check>& out) {
  const std::string& env = t ? t->environ : in.self_environ;
  const std::string whose = t ? fmt::format("pid {}", t->pid) : std::string("this shell");
  auto get = [&](const char* key) { return environ_value(env, key); };
  RankIdentity rank = parse_rank_environment(env);
  const bool distributed = rank.world_size.has_value() || rank.rank.has_value();
  std::string job = distributed ? fmt::format("rank {} of {}", rank.rank ? std::to_string(*rank.rank) : "?",
                                              rank.world_size ? std::to_string(*rank.world_size) : "?")
                                : "";
  const std::string not_dist = fmt::format("{} has no RANK/WORLD_SIZE: not a torch.distributed job", whose);

  // NCCL_DEBUG
  if (!distributed) {
    out.push_back(make("nccl-debug", Verdict::Skip, not_dist));
    out.push_back(make("torch-distributed-debug", Verdict::Skip, not_dist));
    out.push_back(make("nccl-async-error-handling", Verdict::Skip, not_dist));
  } else {
    auto v = get("NCCL_DEBUG");
    out.push_back(
        v && !v->empty()
            ? make("nccl-debug", Verdict::Ok, fmt::format("NCCL_DEBUG={} ({})", *v, job), "",
                   {{"NCCL_DEBUG", *v}})
            : make("nccl-debug", Verdict::Warn,
                   fmt::format("NCCL_DEBUG unset ({}): a stuck NCCL init or collective leaves no log", job),
                   "export NCCL_DEBUG=INFO (and NCCL_DEBUG_SUBSYS=INIT,COLL for more)"));
    auto dd = get("TORCH_DISTRIBUTED_DEBUG");
    bool dd_on = dd && (*dd == "INFO" || *dd == "DETAIL");
    out.push_back(dd_on ? make("torch-distributed-debug", Verdict::Ok,
                               fmt::format("TORCH_DISTRIBUTED_DEBUG={}", *dd), "",
                               {{"TORCH_DISTRIBUTED_DEBUG", *dd}})
                        : make("torch-distributed-debug", Verdict::Warn,
                               fmt::format("TORCH_DISTRIBUTED_DEBUG {} ({}): a rank that calls a different "
                                           "collective, or none, is not named",
                                           dd ? "=" + *dd : std::string("unset"), job),
                               "export TORCH_DISTRIBUTED_DEBUG=DETAIL (checks collective order across ranks; "
                               "INFO is cheaper)"));
    // torch >= 2.2 reads TORCH_NCCL_*, older ones NCCL_*; either wins here.
    auto async_new = get("TORCH_NCCL_ASYNC_ERROR_HANDLING"), async_old = get("NCCL_ASYNC_ERROR_HANDLING");
    auto block_new = get("TORCH_NCCL_BLOCKING_WAIT"), block_old = get("NCCL_BLOCKING_WAIT");
    nlohmann::json d = nlohmann::json::object();
    for (auto [k, v2] :
         {std::pair{"TORCH_NCCL_ASYNC_ERROR_HANDLING", &async_new},
          std::pair{"NCCL_ASYNC_ERROR_HANDLING", &async_old},
          std::pair{"TORCH_NCCL_BLOCKING_WAIT", &block_new}, std::pair{"NCCL_BLOCKING_WAIT", &block_old}})
      if (*v2) d[k] = **v2;
    bool old_torch =
        torch_version && (torch_version->starts_with("1.") || torch_version->starts_with("2.0") ||
                          torch_version->starts_with("2.1"));
    std::string var = old_torch ? "NCCL_ASYNC_ERROR_HANDLING" : "TORCH_NCCL_ASYNC_ERROR_HANDLING";
    if (truthy(async_new) || truthy(async_old) || truthy(block_new) || truthy(block_old)) {
      std::string which = truthy(async_new)   ? "TORCH_NCCL_ASYNC_ERROR_HANDLING=" + *async_new
                          : truthy(async_old) ? "NCCL_ASYNC_ERROR_HANDLING=" + *async_old
                          : truthy(block_new) ? "TORCH_NCCL_BLOCKING_WAIT=" + *block_new
                                              : "NCCL_BLOCKING_WAIT=" + *block_old;
      out.push_back(make(
          "nccl-async-error-handling", Verdict::Ok,
          which + ": a collective past init_process_group(timeout=...) aborts instead of hanging", "", d));
    } else {
      out.push_back(
          make("nccl-async-error-handling", Verdict::Warn,
               fmt::format("neither {0} nor a blocking wait is on ({1}): with torch < 2.2 a stuck NCCL "
                           "collective waits forever, init_process_group(timeout=...) is not enforced",
                           var, job),
               fmt::format("export {}=1 and pass init_process_group(..., "
                           "timeout=datetime.timedelta(minutes=10))",
                           var),
               d));
    }
  }

  // CUDA_LAUNCH_BLOCKING
  auto clb = get("CUDA_LAUNCH_BLOCKING");
  if (truthy(clb))
    out.push_back(make(
        "cuda-launch-blocking", Verdict::Warn,
        fmt::format("CUDA_LAUNCH_BLOCKING={} in {}: every kernel launch waits for the GPU (right for "
                    "locating a device-side assert, slow for training)",
                    *clb, whose),
        "unset CUDA_LAUNCH_BLOCKING once the failing kernel is found", {{"CUDA_LAUNCH_BLOCKING", *clb}}));
  else
    out.push_back(
        make("cuda-launch-blocking", Verdict::Ok,
             fmt::format("CUDA_LAUNCH_BLOCKING {} in {}: launches are asynchronous (set it to 1 only to "
                         "locate a device-side assert)",
                         clb ? "=" + *clb : std::string("unset"), whose)));

  // OMP_NUM_THREADS
  auto omp = get("OMP_NUM_THREADS");
  nlohmann::json od = {{"online_cpus", in.online_cpus}};
  if (!omp) {
    out.push_back(
        make("omp-num-threads", Verdict::Ok,
             fmt::format("OMP_NUM_THREADS unset in {}: torch uses one thread per core ({}); DataLoader "
                         "workers run with 1",
                         whose, in.online_cpus),
             "", od));
  } else {
    od["OMP_NUM_THREADS"] = *omp;
    auto n = parse_u64(trim_line(*omp));
    if (!n || *n == 0)
      out.push_back(make("omp-num-threads", Verdict::Warn,
                         fmt::format("OMP_NUM_THREADS={} is not a positive number", *omp),
                         "export OMP_NUM_THREADS=<cores per rank>", od));
    else if (*n > in.online_cpus)
      out.push_back(make("omp-num-threads", Verdict::Warn,
                         fmt::format("OMP_NUM_THREADS={} exceeds the {} online CPUs: threads oversubscribe",
                                     *n, in.online_cpus),
                         fmt::format("export OMP_NUM_THREADS={} (cores / ranks per node)", in.online_cpus),
                         od));
    else
      out.push_back(make("omp-num-threads", Verdict::Ok,
                         fmt::format("OMP_NUM_THREADS={} ({} online CPUs)", *n, in.online_cpus), "", od));
  }
}

}  // namespace hangtrace::doctor::detail
