/* NCCL names on top of qccl, so host-side NCCL code compiles unchanged:
 *
 *   #include "qccl_nccl_compat.h"     // instead of <nccl.h>
 *   ncclComm_t comm;
 *   ncclCommInitRank(&comm, nranks, id, rank);
 *   ncclAllReduce(send, recv, n, ncclFloat, ncclSum, comm, stream);
 *
 * Buffers are host memory and `stream` is ignored (calls complete before
 * returning). Do not include together with the real <nccl.h>. Types and enum
 * values are qccl's, which keep NCCL's numbering.
 */
#ifndef QCCL_NCCL_COMPAT_H_
#define QCCL_NCCL_COMPAT_H_

#include "qccl.h"

#ifdef NCCL_H_
#error "qccl_nccl_compat.h and <nccl.h> define the same names; include only one"
#endif

#define NCCL_MAJOR QCCL_MAJOR
#define NCCL_MINOR QCCL_MINOR
#define NCCL_PATCH QCCL_PATCH
#define NCCL_VERSION_CODE QCCL_VERSION_CODE
#define NCCL_UNIQUE_ID_BYTES QCCL_UNIQUE_ID_BYTES
#define NCCL_CONFIG_INITIALIZER QCCL_CONFIG_INITIALIZER
#define NCCL_SPLIT_NOCOLOR QCCL_SPLIT_NOCOLOR

typedef qcclResult_t ncclResult_t;
typedef qcclDataType_t ncclDataType_t;
typedef qcclRedOp_t ncclRedOp_t;
typedef qcclUniqueId ncclUniqueId;
typedef qcclComm_t ncclComm_t;
typedef qcclConfig_t ncclConfig_t;

#define ncclSuccess qcclSuccess
#define ncclUnhandledCudaError qcclUnhandledCudaError
#define ncclSystemError qcclSystemError
#define ncclInternalError qcclInternalError
#define ncclInvalidArgument qcclInvalidArgument
#define ncclInvalidUsage qcclInvalidUsage
#define ncclRemoteError qcclRemoteError
#define ncclInProgress qcclInProgress
#define ncclNumResults qcclNumResults

#define ncclInt8 qcclInt8
#define ncclChar qcclChar
#define ncclUint8 qcclUint8
#define ncclInt32 qcclInt32
#define ncclInt qcclInt
#define ncclUint32 qcclUint32
#define ncclInt64 qcclInt64
#define ncclUint64 qcclUint64
#define ncclFloat16 qcclFloat16
#define ncclHalf qcclHalf
#define ncclFloat32 qcclFloat32
#define ncclFloat qcclFloat
#define ncclFloat64 qcclFloat64
#define ncclDouble qcclDouble
#define ncclBfloat16 qcclBfloat16

#define ncclSum qcclSum
#define ncclProd qcclProd
#define ncclMax qcclMax
#define ncclMin qcclMin
#define ncclAvg qcclAvg
#define ncclNumOps qcclNumOps

#define ncclGetVersion qcclGetVersion
#define ncclGetUniqueId qcclGetUniqueId
#define ncclCommInitRank qcclCommInitRank
#define ncclCommInitRankConfig qcclCommInitRankConfig
#define ncclCommSplit qcclCommSplit
#define ncclCommFinalize qcclCommFinalize
#define ncclCommDestroy qcclCommDestroy
#define ncclCommAbort qcclCommAbort
#define ncclCommCount qcclCommCount
#define ncclCommUserRank qcclCommUserRank
#define ncclCommGetAsyncError qcclCommGetAsyncError
#define ncclGetErrorString qcclGetErrorString
#define ncclMemAlloc qcclMemAlloc
#define ncclMemFree qcclMemFree
#define ncclGetLastError qcclGetLastError
#define ncclAllReduce qcclAllReduce
#define ncclBroadcast qcclBroadcast
#define ncclReduce qcclReduce
#define ncclAllGather qcclAllGather
#define ncclReduceScatter qcclReduceScatter
#define ncclAlltoAll qcclAllToAll
#define ncclSend qcclSend
#define ncclRecv qcclRecv
#define ncclGroupStart qcclGroupStart
#define ncclGroupEnd qcclGroupEnd

#endif /* QCCL_NCCL_COMPAT_H_ */
