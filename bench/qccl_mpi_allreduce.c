/* Open MPI's MPI_Allreduce timed like `qk perf all_reduce` (same sizes, same
 * busbw factor 2(n-1)/n, max time over ranks), for bench/qccl_vs_mpi.sh.
 *
 *   mpicc -O2 qccl_mpi_allreduce.c -o mpi_allreduce
 *   mpirun -np 4 ./mpi_allreduce 8 268435456 4 20 5
 *   (min bytes, max bytes, factor, iterations, warmup)
 *
 * Checks the result of one call per size (sum of rank-dependent small
 * integers, exact in float) before timing, and exits 2 on a wrong value. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, n;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  if (argc != 6) {
    if (rank == 0) fprintf(stderr, "usage: %s MINBYTES MAXBYTES FACTOR ITERS WARMUP\n", argv[0]);
    MPI_Finalize();
    return 1;
  }
  size_t lo = strtoull(argv[1], 0, 10), hi = strtoull(argv[2], 0, 10);
  int factor = atoi(argv[3]), iters = atoi(argv[4]), warmup = atoi(argv[5]);
  float* in = malloc(hi + 64);
  float* out = malloc(hi + 64);
  int bad = 0;
  if (rank == 0) printf("# MPI_Allreduce float sum, nranks %d\n#       size     time(us)  busbw(GB/s)\n", n);
  for (size_t sz = lo; sz <= hi; sz *= factor) {
    size_t count = sz / sizeof(float);
    for (size_t i = 0; i < count; ++i) in[i] = (float)((rank * 7 + i * 3) % 9) - 4;
    MPI_Allreduce(in, out, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    for (size_t i = 0; i < count; ++i) {
      float want = 0;
      for (int r = 0; r < n; ++r) want += (float)((r * 7 + i * 3) % 9) - 4;
      if (out[i] != want) ++bad;
    }
    for (int i = 0; i < warmup; ++i) MPI_Allreduce(in, out, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int i = 0; i < iters; ++i) MPI_Allreduce(in, out, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    double us = (MPI_Wtime() - t0) * 1e6 / iters, worst;
    MPI_Allreduce(&us, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    double busbw = worst > 0 ? (double)(count * sizeof(float)) / worst / 1e3 * 2.0 * (n - 1) / n : 0;
    if (rank == 0) printf("  %10zu %12.2f %12.2f\n", count * sizeof(float), worst, busbw);
    fflush(stdout);
  }
  int all_bad = 0;
  MPI_Allreduce(&bad, &all_bad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) printf("# wrong values: %d\n", all_bad);
  free(in);
  free(out);
  MPI_Finalize();
  return all_bad ? 2 : 0;
}
