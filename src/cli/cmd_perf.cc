// `qk perf`: qccl's collective benchmarks in the style of nccl-tests.
//
//   qk perf all_reduce --np 4 -b 8 -e 256M -f 2 -n 20 -w 5 -c 1 -d float -o sum
//
// prints size, count, type, redop, root, time (us), algbw and busbw (GB/s,
// 1e9 B/s) and #wrong for out-of-place and in-place calls, then the average
// bus bandwidth. The harness (sizes, checks, timing, busbw, the table) is
// qk/qccl/perf.h; this file parses the flags, starts the ranks and prints.
//
// Ranks: --np N forks N ranks here. Without --np, the ranks come from the
// launcher's environment (qk::dist::launch_env): under `qk run` (or any
// launcher with MASTER_ADDR/MASTER_PORT) they meet through the store there;
// under mpirun, srun (or QK_RANK/QK_WORLD_SIZE) without them, at
// QCCL_COMM_ID=host:port, or with neither, rank 0's unique id goes to the
// others by MPI_Bcast (QCCL_BACKEND=mpi then runs the collectives on Open MPI).
// `qk perf memcpy -b .. -e ..` measures single-thread memcpy for comparison.
//
// `qk perf --tune [--out FILE] [--tune-ranks 2,4]` measures qccl's four
// tuned sizes on this machine (qk/qccl/tune.h) for each count of ranks and
// writes the tuning file QCCL_TUNE_FILE then names.
#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "command.h"
#include "qccl.h"
#include "qk/base/env.h"
#include "qk/base/error.h"
#include "qk/base/host_info.h"
#include "qk/base/log.h"
#include "qk/dist/launch_env.h"
#include "qk/qccl/perf.h"
#include "qk/qccl/tune.h"
#ifdef QK_HAVE_MPI
#include "qk/qccl/mpi.h"
#endif

namespace qk::cli {
namespace {

struct PerfFlags {
  std::string coll = "all_reduce";
  std::string min_s = "8", max_s = "64M", dtype_s = "float", op_s = "sum";
  double factor = 2;
  int iters = 20, warmup = 5, check = 1, root = 0, np = 0, registered = 0;
  std::string transport, algo;
  double timeout_s = 0;
  bool tune = false;
  std::string out, tune_ranks;
  int tune_rounds = 7;
};

// nccl-tests' -b/-e spelling: 8, 64K, 256M, 1G (powers of 1024).
size_t parse_message_size(const std::string& s) {
  QK_CHECK(!s.empty(), "Expected a size like 8, 64K, 256M or 1G, got an empty string");
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  std::string suf(end);
  double mul = 1;
  if (suf == "K" || suf == "k") mul = 1024.0;
  else if (suf == "M" || suf == "m") mul = 1024.0 * 1024;
  else if (suf == "G" || suf == "g") mul = 1024.0 * 1024 * 1024;
  else QK_CHECK(suf.empty(), "Expected a size like 8, 64K, 256M or 1G, got '", s, "'");
  QK_CHECK(v >= 0 && v * mul <= double(1ull << 40), "size '", s, "' is out of range");
  return static_cast<size_t>(v * mul);
}

qcclDataType_t parse_dtype(const std::string& s) {
  struct { const char* name; qcclDataType_t t; } names[] = {
      {"int8", qcclInt8}, {"char", qcclInt8}, {"uint8", qcclUint8}, {"int16", qcclInt16},
      {"uint16", qcclUint16}, {"int32", qcclInt32}, {"int", qcclInt32}, {"uint32", qcclUint32},
      {"int64", qcclInt64}, {"uint64", qcclUint64}, {"half", qcclFloat16}, {"float16", qcclFloat16},
      {"bfloat16", qcclBfloat16}, {"bf16", qcclBfloat16}, {"float", qcclFloat32},
      {"float32", qcclFloat32}, {"double", qcclFloat64}, {"float64", qcclFloat64}};
  for (auto& n : names)
    if (s == n.name) return n.t;
  QK_THROW(ValueError, "-d: expected int8, uint8, int16, uint16, int32, uint32, int64, uint64, "
           "half, bfloat16, float or double, got '", s, "'");
}

qcclRedOp_t parse_op(const std::string& s) {
  const char* names[] = {"sum", "prod", "max", "min", "avg"};
  for (int i = 0; i < 5; ++i)
    if (s == names[i]) return static_cast<qcclRedOp_t>(i);
  QK_THROW(ValueError, "-o: expected sum, prod, max, min or avg, got '", s, "'");
}

// ---- one rank ---------------------------------------------------------------
int run_rank(const PerfFlags& f, const qccl::PerfCollectiveInfo& ci, const qcclUniqueId& id, int rank, int n) {
  qcclConfig_t cfg = QCCL_CONFIG_INITIALIZER;
  cfg.timeoutS = f.timeout_s;
  cfg.commName = "perf";
  cfg.transport = f.transport.empty() ? nullptr : f.transport.c_str();
  cfg.algo = f.algo.empty() ? nullptr : f.algo.c_str();
  qcclComm_t comm = nullptr;
  qcclResult_t rc = qcclCommInitRankConfig(&comm, n, id, rank, &cfg);
  QK_CHECK_AS(IoError, rc == qcclSuccess, "rank ", rank, ": qccl init failed: ", qcclGetErrorString(rc),
              ": ", qcclGetLastError(nullptr));
  qccl::PerfOptions o;
  o.collective = ci.collective;
  o.type = parse_dtype(f.dtype_s);
  o.op = parse_op(f.op_s);
  o.type_name = f.dtype_s;
  o.op_name = f.op_s;
  o.root = f.root;
  o.min_bytes = parse_message_size(f.min_s);
  o.max_bytes = parse_message_size(f.max_s);
  o.factor = f.factor;
  o.iters = f.iters;
  o.warmup = f.warmup;
  o.check = f.check != 0;
  o.registered = f.registered != 0;
  QK_CHECK(o.min_bytes <= o.max_bytes, "-b ", f.min_s, " is larger than -e ", f.max_s);
  QK_CHECK(f.factor > 1.0, "-f: expected a factor > 1, got ", f.factor);
  QK_CHECK(f.root >= 0 && f.root < n, "-r: expected a root in [0, ", n, "), got ", f.root);
  qccl::PerfBenchmark bench(comm, o);
  const bool show = rank == 0;
  if (show) {
    fmt::print("# qk perf {}: nranks {}, transport {}, algo {}, minBytes {} maxBytes {} step {}x "
               "warmup {} iters {} validation {} buffers {}\n#\n",
               ci.name, n, f.transport.empty() ? "auto" : f.transport, f.algo.empty() ? "auto" : f.algo,
               o.min_bytes, o.max_bytes, o.factor, o.warmup, o.iters, f.check,
               o.registered ? "qcclMemAlloc" : "malloc");
    fmt::print("{}", qccl::perf_table_header());
    std::fflush(stdout);
  }
  const qccl::PerfSummary summary = bench.run([&](const qccl::PerfRow& row) {
    if (!show) return;
    fmt::print("{}", qccl::perf_table_row(row, o));
    std::fflush(stdout);
  });
  if (show) {
    fmt::print("{}", qccl::perf_table_summary(summary));
    std::fflush(stdout);
  }
  qcclCommDestroy(comm);
  return summary.wrong ? 2 : 0;
}

// ---- qk perf --tune ---------------------------------------------------------
QK_ENV_OPTIONAL_STRING(env_tune_file_out, "QCCL_TUNE_FILE",
                       "qk perf --tune: the file written when --out is not given.");

std::string tune_out(const PerfFlags& o) {
  if (!o.out.empty()) return o.out;
  if (auto f = env_tune_file_out.lookup(); f && !f->empty()) return *f;
  return "qccl-tune.json";
}

std::vector<int> parse_rank_list(const std::string& s) {
  std::vector<int> out;
  size_t pos = 0;
  while (pos <= s.size()) {
    size_t comma = s.find(',', pos);
    std::string item = s.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    char* end = nullptr;
    long v = std::strtol(item.c_str(), &end, 10);
    QK_CHECK(!item.empty() && *end == 0 && v >= 2 && v <= 256,
             "--tune-ranks: expected counts of ranks from 2 to 256 separated by commas (2,4), got '", s, "'");
    if (std::find(out.begin(), out.end(), static_cast<int>(v)) == out.end()) out.push_back(static_cast<int>(v));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return out;
}

// 2 and 4 ranks (the benchmarks' counts), and one rank per CPU where there are more.
std::vector<int> default_tune_ranks() {
  std::vector<int> r{2, 4};
  long cpus = ::sysconf(_SC_NPROCESSORS_ONLN);
  if (cpus > 4) r.push_back(static_cast<int>(std::min<long>(cpus, 64)));
  return r;
}

int tune_rank(const PerfFlags& o, const qcclUniqueId& id, int rank, int n) {
  qcclConfig_t cfg = QCCL_CONFIG_INITIALIZER;
  cfg.timeoutS = o.timeout_s;
  cfg.commName = "perf-tune";
  qcclComm_t comm = nullptr;
  qcclResult_t rc = qcclCommInitRankConfig(&comm, n, id, rank, &cfg);
  QK_CHECK_AS(IoError, rc == qcclSuccess, "rank ", rank, ": qccl init failed: ", qcclGetErrorString(rc), ": ",
              qcclGetLastError(nullptr));
  qccl::TuneOptions to;
  to.rounds = o.tune_rounds;
  to.progress = [](const std::string& line) {
    fmt::print("  {}\n", line);
    std::fflush(stdout);
  };
  if (rank == 0) {
    fmt::print("# qk perf --tune: {} ranks on '{}', {} rounds per candidate\n", n, cpu_model_name(), o.tune_rounds);
    std::fflush(stdout);
  }
  qccl::TuneEntry e = qccl::tune_communicator(comm, to);
  qcclCommDestroy(comm);
  if (rank != 0) return 0;
  const std::string path = tune_out(o);
  qccl::add_to_tune_file(path, e);
  fmt::print("# {} ranks: shm_slice {} reduce_slice {} chain_chunk {} cma_copy_chunk {} ({:.1f} s); written to {}\n",
             n, e.sizes.shm_slice, e.sizes.reduce_slice, e.sizes.chain_chunk, e.sizes.cma_copy_chunk, e.seconds, path);
  std::fflush(stdout);
  return 0;
}

void run_memcpy(const PerfFlags& f) {
  const size_t lo = parse_message_size(f.min_s), hi = parse_message_size(f.max_s);
  fmt::print("# qk perf memcpy: single thread, {} iterations\n{}", f.iters, qccl::perf_memcpy_table_header());
  qccl::perf_memcpy(lo, hi, f.factor, f.iters, f.warmup,
                    [](const qccl::MemcpyRow& row) { fmt::print("{}", qccl::perf_memcpy_table_row(row)); });
}

// Runs body(id, rank, size) on this process's rank when a launcher started
// the ranks (and --np is not given): with MASTER_ADDR/MASTER_PORT (`qk run`,
// torchrun, or mpirun/srun given them) they meet through the store; under
// mpirun, srun or QK_RANK without them, at QCCL_COMM_ID or through MPI. False
// when there is no launcher, or a torchrun-style one of a single process.
bool run_launched(const PerfFlags& o, const std::function<int(const qcclUniqueId&, int, int)>& body) {
  if (o.np != 0) return false;
  const dist::LaunchEnv le = dist::launch_env();
  if (le.world_size > 1 && !le.master_addr.empty() && le.master_port > 0) {
    double timeout = o.timeout_s > 0 ? o.timeout_s : 300;
    qcclUniqueId id = dist::rendezvous_unique_id(le, fmt::format("perf/{}", le.restart_count), timeout);
    if (!le.under_qk_run) logging::set_prefix(fmt::format("[rank {}] ", le.rank));
    int rc = body(id, le.rank, le.world_size);
    if (rc) exit_with(rc);
    return true;
  }
  const bool torchrun_style = le.source == "RANK" || le.source == "qk run";
  if (le.source == "none" || (torchrun_style && le.world_size == 1)) return false;
  const int rank = le.rank, size = le.world_size;
  qcclUniqueId id;
  bool via_mpi = false;
#ifdef QK_HAVE_MPI
  // Under mpirun/srun without QCCL_COMM_ID: rank 0's id reaches the others by MPI_Bcast.
  via_mpi = !env::get_raw("QCCL_COMM_ID") && qccl::launched_by_mpi();
  if (via_mpi) id = qccl::unique_id_from_mpi(MPI_COMM_WORLD);
#endif
  if (!via_mpi) {
    QK_CHECK(env::get_raw("QCCL_COMM_ID").has_value(),
             "running under a launcher (rank ", rank, " of ", size,
             "): set QCCL_COMM_ID=host:port so the ranks can meet (rank 0 listens there)");
    QK_CHECK_AS(IoError, qcclGetUniqueId(&id) == qcclSuccess, qcclGetLastError(nullptr));
  }
  logging::set_prefix(fmt::format("[rank {}] ", rank));
  int rc = body(id, rank, size);
  if (rc) exit_with(rc);
  return true;
}

// Forks np ranks here, each running body(id, rank) and exiting with its
// code; returns the worst code.
int fork_ranks(int np, const std::function<int(const qcclUniqueId&, int)>& body) {
  qcclUniqueId id;
  QK_CHECK_AS(IoError, qcclGetUniqueId(&id) == qcclSuccess, qcclGetLastError(nullptr));
  std::fflush(nullptr);
  std::vector<pid_t> pids;
  for (int r = 0; r < np; ++r) {
    pid_t pid = ::fork();
    QK_CHECK_AS(IoError, pid >= 0, "fork failed: ", detail::errno_string(errno));
    if (pid == 0) {
      logging::set_prefix(fmt::format("[rank {}] ", r));
      int code = 1;
      try {
        code = body(id, r);
      } catch (const std::exception& e) {
        fmt::print(stderr, "qk perf: rank {}: error: {}\n", r, e.what());
      }
      std::fflush(nullptr);
      ::_exit(code);
    }
    pids.push_back(pid);
  }
  int worst = 0;
  for (int r = 0; r < np; ++r) {
    int st = 0;
    while (::waitpid(pids[r], &st, 0) < 0 && errno == EINTR) {
    }
    int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    if (code) fmt::print(stderr, "qk perf: rank {} exited with status {}\n", r, code);
    worst = std::max(worst, code);
  }
  return worst;
}

// qk perf --tune: ranks from --tune-ranks forked here, one count after the
// other, or the launcher's ranks (all on this host).
void run_tune(const PerfFlags& o) {
  QK_CHECK(o.tune_rounds >= 1 && o.tune_rounds <= 100, "--tune-rounds: expected 1..100, got ", o.tune_rounds);
  const std::string path = tune_out(o);
  bool replaced = false;
  qccl::tune_file_to_extend(path, &replaced);  // refuses a non-tuning file before any work
  if (replaced)
    fmt::print("# {} was measured on another CPU model: its entries are replaced by this machine's\n", path);
  if (run_launched(o, [&](const qcclUniqueId& id, int r, int n) { return tune_rank(o, id, r, n); })) return;
  QK_CHECK(o.np == 0 || o.tune_ranks.empty(), "--np and --tune-ranks: give one of them");
  std::vector<int> counts = o.np ? std::vector<int>{o.np} : o.tune_ranks.empty() ? default_tune_ranks()
                                                                                 : parse_rank_list(o.tune_ranks);
  for (int np : counts) {
    QK_CHECK(np >= 2 && np <= 256, "--np: tuning needs 2..256 ranks, got ", np);
    int worst = fork_ranks(np, [&](const qcclUniqueId& id, int r) { return tune_rank(o, id, r, np); });
    if (worst) exit_with(worst);
  }
  fmt::print("# use it: export QCCL_TUNE_FILE={}\n", path);
}

void run_perf(const PerfFlags& o) {
  if (o.tune) return run_tune(o);
  if (o.coll == "memcpy") return run_memcpy(o);
  const qccl::PerfCollectiveInfo* ci = qccl::find_perf_collective(o.coll);
  QK_CHECK(ci, "Expected a collective: all_reduce, broadcast, reduce, all_gather, reduce_scatter, "
           "alltoall, alltoallv (or memcpy), got '", o.coll, "'");
  parse_dtype(o.dtype_s);
  parse_op(o.op_s);
  if (run_launched(o, [&](const qcclUniqueId& id, int r, int n) { return run_rank(o, *ci, id, r, n); })) return;
  int np = o.np ? o.np : 1;
  QK_CHECK(np >= 1 && np <= 256, "--np: expected 1..256 ranks, got ", np);
  int worst = fork_ranks(np, [&](const qcclUniqueId& id, int r) { return run_rank(o, *ci, id, r, np); });
  if (worst) exit_with(worst);
}

void setup_perf(CLI::App& app) {
  auto o = std::make_shared<PerfFlags>();
  app.add_option("collective", o->coll,
                 std::string("all_reduce, broadcast, reduce, all_gather, reduce_scatter, alltoall, "
                             "alltoallv or memcpy. ") + qccl::kAllToAllvPattern)
      ->capture_default_str();
  app.add_option("-b,--minbytes", o->min_s, "Smallest size (8, 64K, 1M, ...)")->capture_default_str();
  app.add_option("-e,--maxbytes", o->max_s, "Largest size")->capture_default_str();
  app.add_option("-f,--stepfactor", o->factor, "Size multiplier between rows")->capture_default_str();
  app.add_option("-n,--iters", o->iters, "Timed iterations per size")->check(CLI::Range(1, 1000000))->capture_default_str();
  app.add_option("-w,--warmup_iters", o->warmup, "Untimed iterations first")->check(CLI::Range(0, 100000))->capture_default_str();
  app.add_option("-c,--check", o->check, "Check results (outside the timed loop)")->check(CLI::Range(0, 1))->capture_default_str();
  app.add_option("-d,--datatype", o->dtype_s, "float, half, bfloat16, double, int8, ...")->capture_default_str();
  app.add_option("-o,--op", o->op_s, "sum, prod, max, min or avg")->capture_default_str();
  app.add_option("-r,--root", o->root, "Root of broadcast and reduce")->capture_default_str();
  app.add_option("-R,--registered", o->registered,
                 "1: buffers from qcclMemAlloc, which ranks on one host reduce between directly "
                 "(nccl-tests' buffer registration); 0: malloc")
      ->check(CLI::Range(0, 1))
      ->capture_default_str();
  app.add_option("--np", o->np, "Fork this many ranks here (default: from the launcher, else 1)");
  app.add_option("--transport", o->transport, "auto, shm or tcp (default: QCCL_TRANSPORT)");
  app.add_option("--algo", o->algo, "auto, ring, rd, pairs, tree, chain, direct or hierarchical (default: QCCL_ALGO)");
  app.add_flag("--tune", o->tune,
               "Measure qccl's tuned sizes (shared-memory slice, reduction slice, chain chunk, single-copy "
               "piece) on this machine and write the tuning file QCCL_TUNE_FILE names (the collective "
               "argument and the size options are not used)");
  app.add_option("--out", o->out, "--tune: the file to write or add to (default: $QCCL_TUNE_FILE, else "
                 "qccl-tune.json)");
  app.add_option("--tune-ranks", o->tune_ranks, "--tune: counts of ranks to tune for, one after the other "
                 "(default 2,4 and the CPU count where larger); --np N: only N");
  app.add_option("--tune-rounds", o->tune_rounds, "--tune: timings per candidate value (the median counts)")
      ->capture_default_str();
  app.add_option("--timeout", o->timeout_s, "Deadline of every wait in seconds (default: QCCL_TIMEOUT_S)");
  app.callback([o] { run_perf(*o); });
}

}  // namespace

QK_REGISTER_COMMAND(perf, "Benchmark qccl collectives (nccl-tests style); --np N runs N ranks", setup_perf);

}  // namespace qk::cli
