// Distributed training: which rank a process is, and whether a thread is
// inside a collective (all_reduce, barrier, ...) of torch.distributed.
//
// Pure functions over the snapshot, so the rules that pair ranks (a rank in a
// collective while a peer rank is elsewhere) are tested from fixtures.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "hangtrace/model.h"

namespace hangtrace {

// What a launcher put in each rank's environment: torchrun, accelerate and
// DeepSpeed (RANK), Open MPI (OMPI_COMM_WORLD_*), MPICH / Intel MPI's
// hydra (PMI_*), PMIx, Slurm's srun (SLURM_PROCID).
struct RankIdentity {
  std::optional<int> rank;        // RANK, OMPI_COMM_WORLD_RANK, PMI_RANK, PMIX_RANK, SLURM_PROCID
  std::optional<int> world_size;  // WORLD_SIZE, OMPI_COMM_WORLD_SIZE, PMI_SIZE, SLURM_NTASKS
  std::optional<int> local_rank;  // LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID, SLURM_LOCALID
  // The variable the rank came from ("RANK", "SLURM_PROCID", ...); "" when none.
  std::string source;
  // Whether it came from a batch system or MPI rather than from a
  // torch.distributed launcher: those name every process of a task, the
  // launcher that starts the ranks too.
  bool from_scheduler() const { return !source.empty() && source != "RANK"; }
};

// From the raw bytes of /proc/PID/environ ("KEY=VALUE\0KEY=VALUE\0...").
// The first family whose rank variable is set wins, in the order above
// (torchrun's RANK over the Slurm task's SLURM_PROCID it inherited); its
// size and local rank come from the same family. A variable that is
// missing, empty, negative or not a plain decimal number stays unset: a
// wrong rank is worse than none.
RankIdentity parse_rank_environment(std::string_view environ_bytes);

// Launchers that pass the rank as an argument, not in the environment:
// torch.multiprocessing.spawn runs each child as _wrap(fn, i, args, ...)
// (torch/multiprocessing/spawn.py, 1.x and 2.x), i its index among the
// nprocs children, and the program turns i into its rank. The position among
// its parameters of the integer argument the Python walk reads for a frame
// of `function` in `file` (UserFrame::argument), or -1 for other frames.
int identity_argument_position(std::string_view file, std::string_view function);

// The rank source of a process numbered by its spawn index.
inline constexpr std::string_view kSpawnIndexSource = "torch.multiprocessing.spawn index";

// Numbers the processes of `snap` that no variable numbered, by the spawn
// index their frames show: local_rank is the index; rank is the same when
// none of their TCP connections leaves this host (mp.spawn's children are
// one node's, so the group is this host's alone). A process connected to
// another host keeps no rank: its global rank is node_rank * nprocs + i,
// computed by the program, not read. World size stays unknown (nprocs is
// the node's count, not the group's). A DataLoader worker forked by a rank
// shows the same frame and index, and stays that rank's worker (its parent
// has the same rank: is_rank_process).
void ranks_from_spawn_frames(Snapshot& snap);

struct CollectiveCall {
  std::string op;       // "all_reduce", "barrier", ... (torch.distributed's names)
  std::string backend;  // "gloo", "nccl", "" when no native frame tells
  // The frame that shows it, e.g.
  // "py: all_reduce (torch/distributed/distributed_c10d.py:1536)".
  std::string evidence;
  // The frame that names the backend when it is not the thread's own (see
  // the ProcessInfo overload), e.g. "native:
  // c10d::ProcessGroupGloo::AsyncWork::execute (libtorch_cpu.so.1.13.0) in
  // thread 212"; "" otherwise.
  std::string backend_evidence;
  // Where the program called it: the first Python frame outside torch's own
  // package, outward from the collective's, as "train.py:32", and its
  // function ("main"); "" when no such frame was read.
  std::string caller, caller_function;
};

// The collective the thread is inside, from its Python frames (a function of
// torch/distributed/distributed_c10d.py, the innermost one that is a
// collective) or, for threads without Python frames (gloo's worker threads),
// from a native frame of the backend's algorithm. The backend comes from the
// native frames (gloo:: / c10d::ProcessGroupGloo, nccl* /
// c10d::ProcessGroupNCCL). nullopt when no frame names a collective.
std::optional<CollectiveCall> collective_in_progress(const ThreadInfo& thread);

// The same, with the backend taken from the process's other threads when the
// thread's own frames do not name it. That is the usual case: the Python
// thread waits in the generic c10d::Work::wait while gloo runs the
// collective on a worker thread (ProcessGroupGloo::runLoop), NCCL on the GPU.
std::optional<CollectiveCall> collective_in_progress(const ProcessInfo& process, const ThreadInfo& thread);

// A thread joining its process group rather than in a collective:
// init_process_group and its rendezvous handler, the TCPStore's
// construction (its master waits for every rank to connect), the
// store-based barrier at its end, an elastic agent's rendezvous.
struct RendezvousCall {
  // "TCPStore::waitForWorkers", "connecting to the TCPStore",
  // "init_process_group's store barrier", "init_process_group", "the elastic
  // rendezvous (next_rendezvous)".
  std::string stage;
  std::string evidence;                 // the frame that shows it ("native: ...", "py: ...")
  std::string caller, caller_function;  // as CollectiveCall's
  bool store_master = false;            // in the store master's wait for the ranks to connect
};
std::optional<RendezvousCall> rendezvous_in_progress(const ThreadInfo& thread);

// What a torch.distributed launcher's command line says of the rendezvous
// its agent joins before it starts any rank (torchrun, python -m
// torch.distributed.run or .launch; its options before the program's):
// the nodes it waits for (--nnodes, "2" or "1:4"; "1:1" when not given),
// the backend (--rdzv_backend / --rdzv-backend; "static" when not given,
// "c10d" under --standalone) and the endpoint (--rdzv_endpoint, else
// --master_addr:--master_port, whose defaults are 127.0.0.1:29500).
struct LauncherRendezvous {
  std::string nnodes, backend, endpoint;
  // The node count when --nnodes is one number (or MIN:MAX with MIN ==
  // MAX): how many agents the static backend's store waits for.
  std::optional<int> fixed_nodes() const;
};
std::optional<LauncherRendezvous> launcher_rendezvous(std::string_view comm, std::string_view cmdline);

// The collective one of the process's threads is in (the main thread's when
// it is in one, else the first such thread's), and that thread's tid.
struct ProcessCollective {
  CollectiveCall call;
  int tid = 0;
};
std::optional<ProcessCollective> process_collective(const ProcessInfo& process);

struct WaitGraph;  // analysis.h

// What a rank outside any collective is doing: its main thread's innermost
// Python frame and its wait, e.g. "in wait_for_checkpoint_upload
// (train.py:64), sleeps 3.6e+03 s". `graph` is the wait graph of the
// snapshot holding `process` (build_wait_graph).
struct RankActivity {
  int tid = 0;                      // the thread described (the main thread)
  std::string where;                // "wait_for_checkpoint_upload (train.py:64)", "" without Python frames
  std::string wait;                 // its wait's summary ("sleeps 3.6e+03 s") or activity name, or ""
  std::optional<double> blocked_s;  // how long it has been off CPU, when known
  std::string text;                 // "in WHERE, WAIT" (or what there is of it; "unknown")
};
RankActivity rank_activity(const WaitGraph& graph, const ProcessInfo& process);

// The backend a process's collectives run on, from all its threads' native
// frames: the backend of a thread that is executing collective work (gloo:
// ProcessGroupGloo::AsyncWork::execute, gloo's algorithms and transport
// waits; nccl: NCCL's API, ProcessGroupNCCL's work), else the only backend
// whose threads exist (gloo's idle workers, NCCL's watchdog). "" when no
// thread tells, or two backends do equally. evidence (optional) receives the
// deciding frame.
std::string collective_backend(const ProcessInfo& process, std::string* evidence = nullptr);

}  // namespace hangtrace
