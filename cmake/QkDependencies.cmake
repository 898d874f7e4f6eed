# Third-party packages, all from Debian 12 (scripts/setup.sh installs them).
# Used by the build and by installed qiankaConfig.cmake alike.
include(CMakeFindDependencyMacro)
find_package(Threads REQUIRED)
find_package(fmt REQUIRED)
find_package(nlohmann_json REQUIRED)
find_package(PkgConfig REQUIRED)
pkg_check_modules(OPENBLAS REQUIRED IMPORTED_TARGET openblas)
find_package(dnnl QUIET)
find_package(OpenMP QUIET)  # sizes oneDNN's (OpenMP) thread pool
find_package(MPI QUIET COMPONENTS C)
pkg_check_modules(HWLOC QUIET IMPORTED_TARGET hwloc)
# FFTW (double) for `qk md`'s PME (qianka::md); optional: without it that library is skipped.
pkg_check_modules(FFTW3 QUIET IMPORTED_TARGET fftw3)
# Its threads library (same Debian package) runs PME's transforms on qk's thread pool.
if(FFTW3_FOUND)
  find_library(FFTW3_THREADS_LIBRARY fftw3_threads HINTS ${FFTW3_LIBRARY_DIRS})
endif()
# Checkpoint manifests (qk_base: CheckpointDir checksums).
pkg_check_modules(XXHASH REQUIRED IMPORTED_TARGET libxxhash)
# CIFAR-10 download (qk_data): HTTP(S), MD5, tar.gz.
find_package(CURL REQUIRED)
find_package(OpenSSL REQUIRED COMPONENTS Crypto)
pkg_check_modules(LIBARCHIVE REQUIRED IMPORTED_TARGET libarchive)
# Training curves and the inference grid as PNG (qk_train's plots).
pkg_check_modules(CAIRO REQUIRED IMPORTED_TARGET cairo)
# SentencePiece models (qk_data's SentencePieceTokenizer); optional: without it
# that tokenizer type reports at run time that the build lacks it.
pkg_check_modules(SENTENCEPIECE QUIET IMPORTED_TARGET sentencepiece)
# CUDA toolkit + NCCL (optional, QK_WITH_CUDA): qccl's NCCL backend
# (qianka::qccl_nccl). Found under CUDAToolkit's directories or NCCL_HOME.
# qiankaConfig.cmake sets QK_WITH_CUDA when the installed qianka has it.
set(QK_HAVE_NCCL OFF)
set(QK_HAVE_CUDA OFF)
if(QK_WITH_CUDA)
  find_package(CUDAToolkit QUIET)
  if(CUDAToolkit_FOUND)
    set(QK_HAVE_CUDA ON)  # `qk check` reports it (src/CMakeLists.txt: qk_config)
    find_path(NCCL_INCLUDE_DIR nccl.h HINTS ENV NCCL_HOME ${CUDAToolkit_INCLUDE_DIRS} PATH_SUFFIXES include)
    find_library(NCCL_LIBRARY nccl HINTS ENV NCCL_HOME ${CUDAToolkit_LIBRARY_DIR}
                 ${CUDAToolkit_LIBRARY_ROOT} PATH_SUFFIXES lib lib64)
    if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY AND TARGET CUDA::cudart)
      set(QK_HAVE_NCCL ON)
      if(NOT TARGET QkNCCL::nccl)  # by name, so the installed targets find it again
        add_library(QkNCCL::nccl UNKNOWN IMPORTED)
        set_target_properties(QkNCCL::nccl PROPERTIES IMPORTED_LOCATION "${NCCL_LIBRARY}"
                              INTERFACE_INCLUDE_DIRECTORIES "${NCCL_INCLUDE_DIR}")
      endif()
    endif()
  endif()
endif()
