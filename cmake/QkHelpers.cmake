# qk_add_layer(NAME SOURCES ... DEPS ...): one static library per layer,
# exported as qianka::NAME, with the public include/ tree on its interface.
function(qk_add_layer name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(qk_${name} STATIC ${ARG_SOURCES})
  add_library(qianka::${name} ALIAS qk_${name})
  set_target_properties(qk_${name} PROPERTIES EXPORT_NAME ${name} OUTPUT_NAME qk_${name})
  target_include_directories(qk_${name}
    PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
           $<BUILD_INTERFACE:${PROJECT_BINARY_DIR}/include>
           $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>
    PRIVATE ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(qk_${name} PUBLIC ${ARG_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
  install(TARGETS qk_${name} EXPORT qiankaTargets
    ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
    LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
endfunction()

# qk_add_test_suite(NAME SOURCES ... DEPS ...): one GoogleTest binary per layer;
# every TEST becomes its own ctest entry.
function(qk_add_test_suite name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS;LABELS" ${ARGN})
  if(NOT ARG_SOURCES)
    return()  # a layer whose tests are not written yet
  endif()
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gtest_main Threads::Threads)
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/tests)
  target_compile_definitions(${name} PRIVATE
    QK_SOURCE_DIR="${PROJECT_SOURCE_DIR}" QK_BINARY_DIR="${PROJECT_BINARY_DIR}")
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60 PROPERTIES LABELS "${ARG_LABELS}")
endfunction()
