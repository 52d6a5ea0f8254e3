# Text files embedded in the binaries as C++ raw string literals: a generated
# header declares hangtrace::embedded::NAME, a const char[] holding the file
# byte for byte.
#
# include()d from CMakeLists.txt it defines
#   hangtrace_embed_text(INPUT NAME OUTPUT)
# a custom command that (re)writes the header OUTPUT whenever INPUT changes;
# list OUTPUT among a target's sources and its directory among the target's
# include directories. Run as a script (cmake -DINPUT= -DNAME= -DOUTPUT= -P
# EmbedText.cmake) it writes that header.

# The raw string ends at )__HT_EMBED__" -- no text we embed may contain that.
set(HANGTRACE_EMBED_DELIMITER "__HT_EMBED__")

if(CMAKE_SCRIPT_MODE_FILE)
  foreach(arg INPUT NAME OUTPUT)
    if(NOT DEFINED ${arg} OR "${${arg}}" STREQUAL "")
      message(FATAL_ERROR "EmbedText.cmake: pass -D${arg}=... (INPUT, NAME, OUTPUT)")
    endif()
  endforeach()
  if(NOT NAME MATCHES "^[A-Za-z_][A-Za-z0-9_]*$")
    message(FATAL_ERROR "EmbedText.cmake: NAME '${NAME}' is not a C++ identifier")
  endif()
  file(READ "${INPUT}" content)
  set(terminator ")${HANGTRACE_EMBED_DELIMITER}\"")
  string(FIND "${content}" "${terminator}" at)
  if(NOT at EQUAL -1)
    message(FATAL_ERROR "EmbedText.cmake: ${INPUT} contains ${terminator}, the end of the raw string "
                        "literal it is embedded in; change HANGTRACE_EMBED_DELIMITER in cmake/EmbedText.cmake")
  endif()
  get_filename_component(file_name "${INPUT}" NAME)
  file(WRITE "${OUTPUT}"
       "// Generated from ${file_name} by cmake/EmbedText.cmake; do not edit.\n"
       "#pragma once\n"
       "namespace hangtrace::embedded {\n"
       "inline constexpr const char ${NAME}[] = R\"${HANGTRACE_EMBED_DELIMITER}(${content})${HANGTRACE_EMBED_DELIMITER}\";\n"
       "}\n")
  return()
endif()

set(HANGTRACE_EMBED_TEXT_SCRIPT ${CMAKE_CURRENT_LIST_FILE})

function(hangtrace_embed_text input name output)
  add_custom_command(
    OUTPUT ${output}
    COMMAND ${CMAKE_COMMAND} -DINPUT=${input} -DNAME=${name} -DOUTPUT=${output} -P ${HANGTRACE_EMBED_TEXT_SCRIPT}
    DEPENDS ${input} ${HANGTRACE_EMBED_TEXT_SCRIPT}
    COMMENT "Embedding ${input} as hangtrace::embedded::${name}"
    VERBATIM)
endfunction()
