# Third-party packages, all from Debian 12 (scripts/setup.sh installs them).
# Used by the build and by installed qiankaConfig.cmake alike.
include(CMakeFindDependencyMacro)
find_package(Threads REQUIRED)
find_package(fmt REQUIRED)
find_package(spdlog REQUIRED)
find_package(nlohmann_json REQUIRED)
find_package(PkgConfig REQUIRED)
pkg_check_modules(OPENBLAS REQUIRED IMPORTED_TARGET openblas)
find_package(dnnl QUIET)
find_package(OpenMP QUIET)  # sizes oneDNN's (OpenMP) thread pool
find_package(MPI QUIET COMPONENTS C)
pkg_check_modules(HWLOC QUIET IMPORTED_TARGET hwloc)
pkg_check_modules(XXHASH QUIET IMPORTED_TARGET libxxhash)
# CIFAR-10 download (qk_data): HTTP(S), MD5, tar.gz.
find_package(CURL REQUIRED)
find_package(OpenSSL REQUIRED COMPONENTS Crypto)
pkg_check_modules(LIBARCHIVE REQUIRED IMPORTED_TARGET libarchive)
