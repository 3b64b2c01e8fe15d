# sg_add_test(NAME SOURCES src... [RANKS 1 2 3 4] [TIMEOUT s] [ARGS ...]
#             [LABELS ...] [LIBS ...])
# Builds one test executable and registers it under mpiexec once per rank
# count, as NAME_npN, with PROCESSORS N, a TIMEOUT (a hang fails), labels
# "mpi" and the folder's name (and "ranks4" for the 4-rank run: CI's
# sanitizer pass runs only a chosen few of those, see .ci/run), and exit
# code 77 meaning "skipped".
if(SG_MPI_FLAVOR STREQUAL "openmpi")
  # root and more ranks than cores (CI machines have 2)
  list(APPEND MPIEXEC_PREFLAGS --allow-run-as-root --oversubscribe)
  list(REMOVE_DUPLICATES MPIEXEC_PREFLAGS)
endif()

function(sg_add_test name)
  cmake_parse_arguments(T "" "TIMEOUT" "SOURCES;RANKS;ARGS;LABELS;LIBS" ${ARGN})
  if(NOT T_RANKS)
    set(T_RANKS 1)
  endif()
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT ${SG_TEST_TIMEOUT})
  endif()
  get_filename_component(_folder ${CMAKE_CURRENT_SOURCE_DIR} NAME)
  if(NOT TARGET ${name})
    add_executable(${name} ${T_SOURCES})
    target_link_libraries(${name} PRIVATE shardgrid sg_test sg_flags ${T_LIBS})
    set_target_properties(${name} PROPERTIES
      RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin/tests)
  endif()
  foreach(n ${T_RANKS})
    set(_extra "")
    if(n EQUAL 4)
      set(_extra ";ranks4")
    endif()
    add_test(NAME ${name}_np${n}
      COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${n}
              ${MPIEXEC_PREFLAGS} $<TARGET_FILE:${name}> ${MPIEXEC_POSTFLAGS}
              ${T_ARGS})
    set_tests_properties(${name}_np${n} PROPERTIES
      PROCESSORS ${n} TIMEOUT ${T_TIMEOUT} SKIP_RETURN_CODE 77
      LABELS "mpi;${_folder};${T_LABELS}${_extra}"
      ENVIRONMENT "OMP_NUM_THREADS=1;SG_TEST_RANKS=${n}")
  endforeach()
endfunction()

# sg_add_cli_test(NAME COMMAND ... [RANKS n] [PASS regex] [FAIL regex]
#                 [WILL_FAIL] [TIMEOUT s])
# Runs a program under mpiexec and matches its output.
function(sg_add_cli_test name)
  cmake_parse_arguments(T "WILL_FAIL" "TIMEOUT;RANKS;PASS;FAIL" "COMMAND" ${ARGN})
  if(NOT T_RANKS)
    set(T_RANKS 1)
  endif()
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 60)
  endif()
  get_filename_component(_folder ${CMAKE_CURRENT_SOURCE_DIR} NAME)
  add_test(NAME ${name}
    COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${T_RANKS}
            ${MPIEXEC_PREFLAGS} ${T_COMMAND})
  set_tests_properties(${name} PROPERTIES PROCESSORS ${T_RANKS}
    TIMEOUT ${T_TIMEOUT} LABELS "mpi;${_folder};cli")
  if(T_PASS)
    set_tests_properties(${name} PROPERTIES PASS_REGULAR_EXPRESSION "${T_PASS}")
  endif()
  if(T_FAIL)
    set_tests_properties(${name} PROPERTIES FAIL_REGULAR_EXPRESSION "${T_FAIL}")
  endif()
  if(T_WILL_FAIL)
    set_tests_properties(${name} PROPERTIES WILL_FAIL TRUE)
  endif()
endfunction()
