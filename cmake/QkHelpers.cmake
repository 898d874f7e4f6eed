# Layers (src/CMakeLists.txt lists them, lowest first, in QK_LAYERS): one
# static library per folder src/<layer>, exported as qianka::<layer>. A layer
# sees the public include/ tree and, privately, its own folder only, so its
# private headers are spelled relative to it (in src/tensor: "cpu/gemm.h") and
# no other layer can reach them. tools/check_layers.py (ctest layers.check)
# also refuses includes of a layer above.

# qk_skip_layer(NAME REASON): NAME is not built; REASON says why (the one
# configure summary and the CLI's stand-in commands quote it).
function(qk_skip_layer name reason)
  set_property(GLOBAL APPEND PROPERTY QK_SKIPPED_LAYERS ${name})
  set_property(GLOBAL PROPERTY QK_SKIP_REASON_${name} "${reason}")
endfunction()

# Why a layer is not built ("" when it is, or when it never was declared).
function(qk_skip_reason out name)
  get_property(reason GLOBAL PROPERTY QK_SKIP_REASON_${name})
  set(${out} "${reason}" PARENT_SCOPE)
endfunction()

# The layers named as qk_<layer> among ARGN that have no target (skipped).
function(qk_missing_layer_targets out)
  set(missing)
  foreach(arg IN LISTS ARGN)
    if(arg MATCHES "^qk_([a-z_]+)$" AND NOT TARGET ${arg})
      list(APPEND missing ${CMAKE_MATCH_1})
    endif()
  endforeach()
  set(${out} ${missing} PARENT_SCOPE)
endfunction()

# The layers whose public headers FILE includes: qk/<layer>/... (qccl.h and
# qccl_nccl_compat.h are qccl's). Build rules use it to leave out programs and
# commands whose layers a partial build lacks.
function(qk_layers_included out file)
  file(STRINGS ${file} lines REGEX "^[ \t]*#[ \t]*include[ \t]*[<\"](qk/[a-z_]+/|qccl[a-z_]*\\.h)")
  set(layers)
  foreach(line IN LISTS lines)
    if(line MATCHES "[<\"]qk/hpc/md/")
      list(APPEND layers md)  # qk md's own library (src/hpc/md): it needs FFTW, not the hpc layer's MPI
    elseif(line MATCHES "[<\"]qk/([a-z_]+)/")
      list(APPEND layers ${CMAKE_MATCH_1})
    else()
      list(APPEND layers qccl)
    endif()
  endforeach()
  list(REMOVE_DUPLICATES layers)
  set(${out} ${layers} PARENT_SCOPE)
endfunction()

# Of LAYERS, those without a library in this build.
function(qk_unbuilt_layers out)
  set(unbuilt)
  foreach(layer IN LISTS ARGN)
    if(NOT TARGET qk_${layer})
      list(APPEND unbuilt ${layer})
    endif()
  endforeach()
  set(${out} ${unbuilt} PARENT_SCOPE)
endfunction()

# qk_unity_build(TARGET): TARGET's C++ sources compiled in batches when
# QK_UNITY_BUILD is on (CUDA sources stay one per compile: nvcc's time is in
# the kernels, not in shared headers).
function(qk_unity_build target)
  if(QK_UNITY_BUILD)
    set_target_properties(${target} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE ${QK_UNITY_BATCH_SIZE})
    # Each .cc is an #include of its batch's file there, so GCC takes a class of
    # a .cc whose members have anonymous-namespace types for one in a header.
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wno-subobject-linkage>)
    get_target_property(sources ${target} SOURCES)
    foreach(source IN LISTS sources)
      if(source MATCHES "\\.cu$")
        set_source_files_properties(${source} TARGET_DIRECTORY ${target} PROPERTIES SKIP_UNITY_BUILD_INCLUSION ON)
      endif()
    endforeach()
  endif()
endfunction()

# qk_add_layer(NAME SOURCES ... DEPS ... PRIVATE_DEPS ...): the layer's
# library. A macro, so that when a layer it links (qk_<layer> in DEPS or
# PRIVATE_DEPS) is not built it can return from the layer's CMakeLists.txt:
# the layer is then skipped too, and says so in the configure summary.
macro(qk_add_layer name)
  qk_missing_layer_targets(_qk_missing ${ARGN})
  if(_qk_missing)
    list(JOIN _qk_missing ", " _qk_missing)
    qk_skip_layer(${name} "needs ${_qk_missing}")
    return()
  endif()
  _qk_define_layer(${name} ${ARGN})
endmacro()

function(_qk_define_layer name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(qk_${name} STATIC ${ARG_SOURCES})
  add_library(qianka::${name} ALIAS qk_${name})
  set_target_properties(qk_${name} PROPERTIES EXPORT_NAME ${name} OUTPUT_NAME qk_${name})
  qk_unity_build(qk_${name})
  target_include_directories(qk_${name}
    PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
           $<BUILD_INTERFACE:${PROJECT_BINARY_DIR}/include>
           $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>
    PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
  target_link_libraries(qk_${name} PUBLIC ${ARG_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
  install(TARGETS qk_${name} EXPORT qiankaTargets
    ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
    LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
endfunction()

# qk_add_test_suite(NAME SOURCES ... DEPS ...): one GoogleTest binary per
# layer; every TEST becomes its own ctest entry. Tests of tests/<layer> may
# include that layer's private headers (spelled as inside the layer), the
# shared helpers of tests/ and public headers; nothing of another layer's
# src/. A macro like qk_add_layer: without a layer it links, the suite (and
# the rest of its CMakeLists.txt) is left out.
macro(qk_add_test_suite name)
  qk_missing_layer_targets(_qk_missing ${ARGN})
  if(_qk_missing)
    list(JOIN _qk_missing ", " _qk_missing)
    message(STATUS "${name}: not built (needs ${_qk_missing})")
    return()
  endif()
  _qk_define_test_suite(${name} ${ARGN})
endmacro()

function(_qk_define_test_suite name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS;LABELS" ${ARGN})
  if(NOT ARG_SOURCES)
    return()  # a layer whose tests are not written yet
  endif()
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gtest_main Threads::Threads)
  qk_test_private_includes(${name})
  target_compile_definitions(${name} PRIVATE
    QK_SOURCE_DIR="${PROJECT_SOURCE_DIR}" QK_BINARY_DIR="${PROJECT_BINARY_DIR}")
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60 PROPERTIES LABELS "${ARG_LABELS}")
endfunction()

# qk_test_private_includes(TARGET): what a program under tests/<layer> may
# include: tests/ (shared helpers) and src/<layer> (the private headers of the
# layer it tests).
function(qk_test_private_includes target)
  cmake_path(GET CMAKE_CURRENT_SOURCE_DIR FILENAME layer)
  target_include_directories(${target} PRIVATE ${PROJECT_SOURCE_DIR}/tests)
  if(IS_DIRECTORY ${PROJECT_SOURCE_DIR}/src/${layer})
    target_include_directories(${target} PRIVATE ${PROJECT_SOURCE_DIR}/src/${layer})
  endif()
endfunction()
