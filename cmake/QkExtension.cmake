# Extension ops (custom operators) as plugins, the CMake side of
# qk/plugin/extension.h; find_package(qianka) and the build tree both give these.
#
#   qk_add_extension(my_ops SOURCES op.cc op_kernel.cu
#                    [CXX_FLAGS -O3 ...] [CUDA_FLAGS --use_fast_math ...] [FORCE_CUDA])
#     A plugin, libmy_ops.so, for qk::plugin::load_library or QK_EXTENSIONS.
#     .cu sources are compiled by nvcc, the rest by the C++ compiler; with
#     FORCE_CUDA every source goes through nvcc (torch_musa's force_mcc).
#     CXX_FLAGS reach C++ compiles, CUDA_FLAGS nvcc's. A CUDA source without
#     a CUDA compiler stops the configure with a message saying what to do;
#     qk_cuda_compiler_found() tells beforehand whether there is one. When
#     CUDA sources are built in, QK_EXTENSION_WITH_CUDA=1 is defined.
#     The plugin links no qianka library: its calls resolve to the program
#     that loads it (one registry, one allocator; docs/extensions.md).
#
#   qk_enable_extensions(my_program)
#     Makes an executable able to load plugins: it links the layers a plugin
#     may call (base, tensor, autograd, plugin) whole and exports their symbols
#     (ENABLE_EXPORTS). `qk` is built this way.
#
#   qk_cuda_compiler_found(<var>)
#     Sets <var> to TRUE when a CUDA compiler is found (and enables CUDA).
include_guard(GLOBAL)
include(CheckLanguage)

macro(qk_cuda_compiler_found _qk_var)
  # nvcc from PATH or CUDACXX, else the toolkit's own (e.g. /usr/local/cuda
  # off PATH). A CMAKE_CUDA_COMPILER given by the user is left as it is.
  if(NOT DEFINED CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX})
    find_program(_qk_nvcc nvcc)
    if(NOT _qk_nvcc)
      find_package(CUDAToolkit QUIET)
      if(CUDAToolkit_NVCC_EXECUTABLE AND EXISTS "${CUDAToolkit_NVCC_EXECUTABLE}")
        set(CMAKE_CUDA_COMPILER "${CUDAToolkit_NVCC_EXECUTABLE}" CACHE FILEPATH "CUDA compiler")
      endif()
    endif()
  endif()
  if(NOT DEFINED CMAKE_CUDA_COMPILER)
    check_language(CUDA)
  endif()
  if(CMAKE_CUDA_COMPILER)
    enable_language(CUDA)  # a macro: this runs in the caller's directory scope, as it must
    set(${_qk_var} TRUE)
  else()
    set(${_qk_var} FALSE)
  endif()
endmacro()

macro(qk_add_extension _qk_name)
  cmake_parse_arguments(_qk_ext "FORCE_CUDA" "" "SOURCES;CXX_FLAGS;CUDA_FLAGS" ${ARGN})
  if(_qk_ext_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "qk_add_extension(${_qk_name}): unknown arguments '${_qk_ext_UNPARSED_ARGUMENTS}'; "
                        "the form is qk_add_extension(NAME SOURCES ... [CXX_FLAGS ...] [CUDA_FLAGS ...] [FORCE_CUDA])")
  endif()
  if(NOT _qk_ext_SOURCES)
    message(FATAL_ERROR "qk_add_extension(${_qk_name}): no SOURCES")
  endif()
  set(_qk_ext_cuda_sources)
  foreach(_qk_src IN LISTS _qk_ext_SOURCES)
    if(_qk_src MATCHES "\\.cu$")
      list(APPEND _qk_ext_cuda_sources ${_qk_src})
    endif()
  endforeach()
  if(_qk_ext_cuda_sources OR _qk_ext_FORCE_CUDA)
    qk_cuda_compiler_found(_qk_ext_have_cuda)
    if(NOT _qk_ext_have_cuda)
      if(_qk_ext_FORCE_CUDA)
        set(_qk_why "FORCE_CUDA compiles every source with nvcc")
      else()
        list(JOIN _qk_ext_cuda_sources ", " _qk_why)
        set(_qk_why "${_qk_why}: CUDA source(s)")
      endif()
      message(FATAL_ERROR
        "qk_add_extension(${_qk_name}): ${_qk_why}, but no CUDA compiler (nvcc) was found. "
        "Install the CUDA toolkit and put nvcc on PATH, or pass "
        "-DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc; or build the CPU kernels alone: "
        "qk_cuda_compiler_found(<var>) tells whether nvcc is there, so the .cu can be left out.")
    endif()
  endif()
  _qk_define_extension(${_qk_name} "${_qk_ext_SOURCES}" "${_qk_ext_CXX_FLAGS}"
                       "${_qk_ext_CUDA_FLAGS}" "${_qk_ext_FORCE_CUDA}")
endmacro()

function(_qk_define_extension name sources cxx_flags cuda_flags force_cuda)
  add_library(${name} MODULE ${sources})
  target_link_libraries(${name} PRIVATE qianka::extension_api)
  target_compile_features(${name} PRIVATE cxx_std_20)
  set_target_properties(${name} PROPERTIES PREFIX "lib")
  target_compile_options(${name} PRIVATE
    "$<$<COMPILE_LANGUAGE:CXX>:${cxx_flags}>" "$<$<COMPILE_LANGUAGE:CUDA>:${cuda_flags}>")
  set(uses_cuda FALSE)
  foreach(src IN LISTS sources)
    if(src MATCHES "\\.cu$")
      set(uses_cuda TRUE)
    elseif(force_cuda AND src MATCHES "\\.(cc|cpp|cxx|c\\+\\+|C)$")
      set_source_files_properties(${src} TARGET_DIRECTORY ${name} PROPERTIES LANGUAGE CUDA)
      set(uses_cuda TRUE)
    endif()
  endforeach()
  if(uses_cuda)
    # C++20 as qianka's headers need; by flag, as CMake 3.25 knows no CUDA20
    # dialect for nvcc.
    set_target_properties(${name} PROPERTIES CUDA_RUNTIME_LIBRARY Shared)
    target_compile_options(${name} PRIVATE "$<$<COMPILE_LANGUAGE:CUDA>:-std=c++20>")
    target_compile_definitions(${name} PRIVATE QK_EXTENSION_WITH_CUDA=1
      # nvcc's front end rejects fmt's consteval format strings (qk/base/log.h):
      # checked at run time in CUDA-compiled sources instead.
      "$<$<COMPILE_LANGUAGE:CUDA>:FMT_CONSTEVAL=>" "$<$<COMPILE_LANGUAGE:CUDA>:FMT_USE_CONSTEXPR=1>")
  endif()
endfunction()

function(qk_enable_extensions target)
  set_target_properties(${target} PROPERTIES ENABLE_EXPORTS ON)
  target_link_libraries(${target} PRIVATE qianka::plugin)
  # Whole archives: a plugin may call any public function of these layers,
  # not only those this program happens to use. Link options come before
  # the libraries on the link line; their normal appearance later adds nothing.
  set(archives)
  foreach(layer base tensor autograd plugin)
    list(APPEND archives "$<TARGET_FILE:qianka::${layer}>")
  endforeach()
  target_link_options(${target} PRIVATE "LINKER:--whole-archive" ${archives}
                      "LINKER:--no-whole-archive")
endfunction()
