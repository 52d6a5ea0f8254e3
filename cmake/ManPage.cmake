# hangtrace.1, written by help2man from the binary's own --help and --version
# (cmake/man_help.sh.in), so every option the binary has is in the page; the
# hand-written sections are in cmake/hangtrace.h2m. Without help2man (Debian:
# help2man) there is no man page, and configure says so.
find_program(HANGTRACE_HELP2MAN help2man)
if(NOT HANGTRACE_HELP2MAN)
  message(STATUS "hangtrace: no man page (help2man not found; Debian: help2man)")
  return()
endif()
set(HANGTRACE_MAN_PAGE ${CMAKE_BINARY_DIR}/man/hangtrace.1)
set(_ht_man_help ${CMAKE_BINARY_DIR}/man/hangtrace)
file(GENERATE OUTPUT ${_ht_man_help} INPUT ${PROJECT_SOURCE_DIR}/cmake/man_help.sh.in
     FILE_PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE WORLD_READ WORLD_EXECUTE)
add_custom_command(
  OUTPUT ${HANGTRACE_MAN_PAGE}
  COMMAND ${HANGTRACE_HELP2MAN} --no-info --section=1
          "--name=why did this training job stop making progress?"
          --include=${PROJECT_SOURCE_DIR}/cmake/hangtrace.h2m --output=${HANGTRACE_MAN_PAGE}.tmp ${_ht_man_help}
  COMMAND ${CMAKE_COMMAND} -E rename ${HANGTRACE_MAN_PAGE}.tmp ${HANGTRACE_MAN_PAGE}
  DEPENDS hangtrace ${PROJECT_SOURCE_DIR}/cmake/man_help.sh.in ${PROJECT_SOURCE_DIR}/cmake/hangtrace.h2m
  COMMENT "Man page hangtrace.1 (help2man)"
  VERBATIM)
add_custom_target(hangtrace_man ALL DEPENDS ${HANGTRACE_MAN_PAGE})
install(FILES ${HANGTRACE_MAN_PAGE} DESTINATION share/man/man1)
