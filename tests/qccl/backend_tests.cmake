# qccl backend tests that do not fit the forked-rank suite (included from
# CMakeLists.txt): the collective matrix as 4 MPI ranks under mpirun with
# QCCL_BACKEND=mpi, and device buffers through NCCL where CUDA is present.
if(MPI_C_FOUND)
  add_executable(qk_qccl_backend_mpi_tests backend_mpi_matrix.cc)
  target_link_libraries(qk_qccl_backend_mpi_tests PRIVATE qk_qccl GTest::gtest Threads::Threads)
  qk_test_private_includes(qk_qccl_backend_mpi_tests)
  add_test(NAME qccl_backend_mpi_np4
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/backend_mpirun.sh $<TARGET_FILE:qk_qccl_backend_mpi_tests>)
  set_tests_properties(qccl_backend_mpi_np4 PROPERTIES
    ENVIRONMENT "QCCL_BACKEND=mpi;QCCL_TIMEOUT_S=60" SKIP_RETURN_CODE 77 TIMEOUT 300 LABELS qccl)
  # Overhead against MPI_Allreduce called directly (a program, not a test; docs/qccl.md).
  add_executable(qk_qccl_backend_mpi_bench backend_mpi_bench.cc)
  target_link_libraries(qk_qccl_backend_mpi_bench PRIVATE qk_qccl)
  qk_test_private_includes(qk_qccl_backend_mpi_bench)
else()
  message(STATUS "qccl: MPI backend tests not built (MPI not found)")
endif()
if(TARGET qk_qccl_nccl)
  qk_add_test_suite(qk_qccl_backend_nccl_tests SOURCES backend_nccl_gpu.cc DEPS qk_qccl_nccl LABELS qccl)
endif()
