/* qccl: collective communication between processes, with NCCL's API shape.
 *
 * qccl moves host buffers between ranks on one machine (shared memory,
 * single-copy CMA for large messages) and across machines (TCP); a program
 * that links the NCCL backend (qianka::qccl_nccl, built where CMake finds CUDA
 * and NCCL) passes device buffers too, which go through NCCL on the current
 * CUDA device (QCCL_BACKEND; docs/qccl.md "Backends"). Every call has a
 * deadline, so a dead or stalled peer makes the call return an error naming
 * that peer instead of hanging. Calls are blocking on every backend: when one
 * returns, its buffers are ready (the NCCL backend enqueues on `stream` and
 * waits for it). Host-buffer code passes NULL for `stream`.
 *
 *   qcclUniqueId id;
 *   if (rank == 0) qcclGetUniqueId(&id);          // starts the bootstrap root
 *   ... send id to every rank (file, MPI_Bcast, fork, environment) ...
 *   qcclComm_t comm;
 *   QCCL_CHECK(qcclCommInitRank(&comm, nranks, id, rank));
 *   QCCL_CHECK(qcclAllReduce(sendbuf, recvbuf, n, qcclFloat32, qcclSum, comm, NULL));
 *   qcclCommDestroy(comm);
 *
 * Environment (all optional): QCCL_COMM_ID=host:port (root address as in
 * NCCL), QCCL_TIMEOUT_S (deadline, default 300), QCCL_TRANSPORT=auto|shm|tcp,
 * QCCL_ALGO=auto|ring|rd|pairs|tree|chain|direct|hierarchical,
 * QCCL_DEBUG=VERSION|WARN|INFO|TRACE, QCCL_DEBUG_SUBSYS=INIT,COLL,P2P,...
 * (NCCL_DEBUG / NCCL_DEBUG_SUBSYS too). docs/qccl.md lists them all.
 */
#ifndef QCCL_H_
#define QCCL_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define QCCL_MAJOR 0
#define QCCL_MINOR 1
#define QCCL_PATCH 0
#define QCCL_VERSION_CODE (QCCL_MAJOR * 10000 + QCCL_MINOR * 100 + QCCL_PATCH)

/* Results keep NCCL's numbering so code that prints or compares them ports. */
typedef enum {
  qcclSuccess = 0,
  qcclUnhandledCudaError = 1, /* never returned: CUDA failures are qcclSystemError */
  qcclSystemError = 2,        /* a system call failed (socket, shm, ...) */
  qcclInternalError = 3,      /* a bug in qccl */
  qcclInvalidArgument = 4,    /* a bad pointer, count, type, op or rank */
  qcclInvalidUsage = 5,       /* a call made in the wrong state, or on an aborted comm */
  qcclRemoteError = 6,        /* a peer failed, closed or sent malformed data */
  qcclInProgress = 7,
  qcclTimeout = 8,            /* a deadline passed (QCCL_TIMEOUT_S / config.timeoutS) */
  qcclNumResults = 9
} qcclResult_t;

typedef enum {
  qcclInt8 = 0, qcclChar = 0,
  qcclUint8 = 1,
  qcclInt32 = 2, qcclInt = 2,
  qcclUint32 = 3,
  qcclInt64 = 4,
  qcclUint64 = 5,
  qcclFloat16 = 6, qcclHalf = 6,
  qcclFloat32 = 7, qcclFloat = 7,
  qcclFloat64 = 8, qcclDouble = 8,
  qcclBfloat16 = 9,
  qcclInt16 = 10,
  qcclUint16 = 11,
  qcclNumTypes = 12
} qcclDataType_t;

/* f16 and bf16 are reduced in f32 and rounded once per reduction step. */
typedef enum {
  qcclSum = 0,
  qcclProd = 1,
  qcclMax = 2,
  qcclMin = 3,
  qcclAvg = 4, /* sum, then divided by nranks (integer division for integer types) */
  qcclNumOps = 5
} qcclRedOp_t;

#define QCCL_UNIQUE_ID_BYTES 128
typedef struct {
  char internal[QCCL_UNIQUE_ID_BYTES];
} qcclUniqueId;

typedef struct qcclComm* qcclComm_t;
/* NCCL's cudaStream_t: the NCCL backend enqueues device-buffer calls on it
 * (NULL: a stream of its own) and waits for it before returning; host
 * buffers ignore it. */
typedef void* qcclStream_t;

/* Per-communicator settings. Initialise with QCCL_CONFIG_INITIALIZER; a field
 * left at its initializer value falls back to the environment or default. */
typedef struct {
  size_t size;        /* sizeof(qcclConfig_t), set by the initializer */
  unsigned int magic;
  unsigned int version;
  int blocking;       /* accepted for NCCL compatibility; qccl is always blocking */
  double timeoutS;    /* deadline of every wait; <= 0: QCCL_TIMEOUT_S (default 300) */
  const char* commName; /* shown in logs and flight-recorder dumps; NULL: "qccl" */
  const char* transport; /* "auto", "shm" or "tcp"; NULL: QCCL_TRANSPORT */
  const char* algo;      /* "auto", "ring", "rd", "pairs", "tree", "chain", "direct" or
                            "hierarchical"; NULL: QCCL_ALGO */
} qcclConfig_t;

#define QCCL_CONFIG_MAGIC 0x51434346u
#define QCCL_CONFIG_INITIALIZER \
  { sizeof(qcclConfig_t), QCCL_CONFIG_MAGIC, QCCL_VERSION_CODE, 1, 0.0, NULL, NULL, NULL }

#define QCCL_SPLIT_NOCOLOR (-1)

qcclResult_t qcclGetVersion(int* version);
/* Creates a unique id and starts the bootstrap root in this process (a
 * background thread that lives until every rank joined or the deadline). */
qcclResult_t qcclGetUniqueId(qcclUniqueId* uniqueId);

qcclResult_t qcclCommInitRank(qcclComm_t* comm, int nranks, qcclUniqueId commId, int rank);
qcclResult_t qcclCommInitRankConfig(qcclComm_t* comm, int nranks, qcclUniqueId commId, int rank,
                                    qcclConfig_t* config);
/* Collective over `comm`: ranks with the same color form a new communicator,
 * ordered by key (then by old rank). color QCCL_SPLIT_NOCOLOR gives *newcomm = NULL. */
qcclResult_t qcclCommSplit(qcclComm_t comm, int color, int key, qcclComm_t* newcomm,
                           qcclConfig_t* config);
/* Waits for outstanding work (none: qccl calls are blocking). */
qcclResult_t qcclCommFinalize(qcclComm_t comm);
qcclResult_t qcclCommDestroy(qcclComm_t comm);
/* Safe from any thread at any time: calls in progress on `comm` return
 * qcclInvalidUsage within milliseconds, peers see
 * this rank leave (their calls fail naming it), and the communicator is
 * freed. Never blocks on a peer. */
qcclResult_t qcclCommAbort(qcclComm_t comm);
qcclResult_t qcclCommCount(const qcclComm_t comm, int* count);
qcclResult_t qcclCommUserRank(const qcclComm_t comm, int* rank);
/* The error that broke the communicator (qcclSuccess while it is healthy). */
qcclResult_t qcclCommGetAsyncError(qcclComm_t comm, qcclResult_t* asyncError);

/* What this rank moved on `comm` since it was created: payload bytes (qccl's
 * 16-byte message headers not counted) and messages, to and from all peers,
 * every call counted (set-up probes, collectives, point to point; an all-reduce
 * that went direct counts the bytes it read from and stored into the peers'
 * buffers). A qccl extension (NCCL has none); safe from any thread. Only the
 * native engine counts: under QCCL_BACKEND=mpi or a device backend they stay 0. */
typedef struct {
  uint64_t bytesSent;
  uint64_t bytesReceived;
  uint64_t messagesSent;
  uint64_t messagesReceived;
} qcclCommTraffic_t;
qcclResult_t qcclCommGetTraffic(const qcclComm_t comm, qcclCommTraffic_t* traffic);

/* qccl extension: the device backend that carries `buff` in this
 * communicator's calls ("nccl" for CUDA memory when qianka::qccl_nccl is
 * linked and QCCL_BACKEND is auto or nccl), or NULL when qccl would treat it
 * as host memory. A caller holding memory of a device qccl cannot carry
 * stages it through host memory instead (qk::dist's process groups do). */
qcclResult_t qcclCommDeviceBackend(const qcclComm_t comm, const void* buff, const char** name);

/* Host memory that the other ranks on this host can map (like ncclMemAlloc):
 * an all-reduce whose send and receive buffers lie in such allocations on
 * every rank reduces straight between the ranks' buffers (QCCL_ALGO=direct;
 * QCCL_DIRECT=0 turns it off). Page aligned; free with qcclMemFree. */
qcclResult_t qcclMemAlloc(void** ptr, size_t size);
qcclResult_t qcclMemFree(void* ptr);

const char* qcclGetErrorString(qcclResult_t result);
/* The message of the last failed call on this thread: what, where, which peer. */
const char* qcclGetLastError(qcclComm_t comm);

qcclResult_t qcclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                           qcclDataType_t datatype, qcclRedOp_t op, qcclComm_t comm,
                           qcclStream_t stream);
qcclResult_t qcclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                           qcclDataType_t datatype, int root, qcclComm_t comm,
                           qcclStream_t stream);
qcclResult_t qcclReduce(const void* sendbuff, void* recvbuff, size_t count,
                        qcclDataType_t datatype, qcclRedOp_t op, int root, qcclComm_t comm,
                        qcclStream_t stream);
/* recvbuff holds nranks * sendcount elements, rank i's block at i * sendcount. */
qcclResult_t qcclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                           qcclDataType_t datatype, qcclComm_t comm, qcclStream_t stream);
/* sendbuff holds nranks * recvcount elements; rank i receives the reduced block i. */
qcclResult_t qcclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                               qcclDataType_t datatype, qcclRedOp_t op, qcclComm_t comm,
                               qcclStream_t stream);
/* Block j of sendbuff (count elements) goes to rank j, arriving as block i there. */
qcclResult_t qcclAllToAll(const void* sendbuff, void* recvbuff, size_t count,
                          qcclDataType_t datatype, qcclComm_t comm, qcclStream_t stream);
/* All-to-all with a count per peer (MPI_Alltoallv; a qccl extension). Counts
 * and displacements are in elements, one per rank: sendcounts[j] elements at
 * sendbuff + sdispls[j] go to rank j, and the recvcounts[i] elements from
 * rank i land at recvbuff + rdispls[i]. recvcounts[i] must equal rank i's
 * sendcounts[this rank]: ranks that disagree get qcclRemoteError naming the
 * pair, not a hang. Zero counts are fine (a buffer with no elements may be
 * NULL). There is no in-place form: the span of the send blocks may not
 * overlap the span of the receive blocks, nor two receive blocks each other.
 *
 *   // 2 ranks: rank 0 keeps 1 element and sends 3 to rank 1; rank 1 sends 2
 *   // to rank 0 and keeps none.
 *   size_t sc[2] = {1, 3}, sd[2] = {0, 1}, rc[2] = {1, 2}, rd[2] = {0, 1};  // rank 0
 *   size_t sc[2] = {2, 0}, sd[2] = {0, 2}, rc[2] = {3, 0}, rd[2] = {0, 3};  // rank 1
 *   QCCL_CHECK(qcclAllToAllv(send, sc, sd, recv, rc, rd, qcclFloat32, comm, NULL));
 */
qcclResult_t qcclAllToAllv(const void* sendbuff, const size_t sendcounts[], const size_t sdispls[],
                           void* recvbuff, const size_t recvcounts[], const size_t rdispls[],
                           qcclDataType_t datatype, qcclComm_t comm, qcclStream_t stream);
/* Point to point. Outside a group each call completes alone; pair a send and a
 * receive that must overlap (e.g. an exchange) inside qcclGroupStart/End. */
qcclResult_t qcclSend(const void* sendbuff, size_t count, qcclDataType_t datatype, int peer,
                      qcclComm_t comm, qcclStream_t stream);
qcclResult_t qcclRecv(void* recvbuff, size_t count, qcclDataType_t datatype, int peer,
                      qcclComm_t comm, qcclStream_t stream);
/* Calls between GroupStart and GroupEnd (per thread, nestable) are queued and
 * run at the outermost GroupEnd: point-to-point calls together, then the
 * collectives in call order. Buffers must stay valid until GroupEnd returns. */
qcclResult_t qcclGroupStart(void);
qcclResult_t qcclGroupEnd(void);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* QCCL_H_ */
