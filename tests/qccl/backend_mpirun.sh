#!/bin/sh
# Runs a test program as 4 MPI ranks (ctest: qccl_backend_mpi_np4). Exits 77
# (ctest's SKIP_RETURN_CODE) with a message when mpirun is missing, 1 under
# CI=true (tests/common/reference_tool.sh).
# --allow-run-as-root: CI containers run as root; --oversubscribe: 4 ranks on 2 cores.
MPIRUN=$(command -v mpirun || command -v mpiexec)
if [ -z "$MPIRUN" ]; then
  . "$(dirname "$0")/../common/reference_tool.sh"
  missing_reference_tool "mpirun not found; install Open MPI (Debian: openmpi-bin) to run the MPI backend tests"
fi
exec "$MPIRUN" --allow-run-as-root --oversubscribe -np "${QK_TEST_NP:-4}" "$@"
