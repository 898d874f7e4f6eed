# shellcheck shell=sh
# Sourced by the shell-script tests (fuzz/run.sh, tests/qccl/backend_mpirun.sh):
# the rule of tests/common/reference_tool.h. A missing reference tool exits 77
# (ctest's SKIP_RETURN_CODE) with the reason, or 1 in CI (CI=true), where
# scripts/setup.sh installed every tool and a missing one is a missing install step.
#   missing_reference_tool "mpirun not found; install Open MPI (Debian: openmpi-bin)"
missing_reference_tool() {
  case "$(printf '%s' "${CI:-}" | tr '[:upper:]' '[:lower:]')" in
    true|1|yes)
      echo "FAILED: reference tool missing under CI=true (scripts/setup.sh should have installed it): $*"
      exit 1 ;;
  esac
  echo "SKIPPED: $*"
  exit 77
}
