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
# A session folder of its own: two Open MPI 4 jobs starting at once (ctest
# -j2) can race to make /tmp/ompi.HOST.UID ("File exists", orte_init failed).
session=$(mktemp -d /tmp/qk_mpirun_XXXXXX)
OMPI_MCA_orte_tmpdir_base="$session" "$MPIRUN" --allow-run-as-root --oversubscribe -np "${QK_TEST_NP:-4}" "$@"
status=$?
rm -rf "$session"
exit $status
