# Turns a text file into a C++ header with a raw string literal.
file(READ ${INPUT} content)
get_filename_component(name ${INPUT} NAME)
file(WRITE ${OUTPUT} "// Generated from ${name}; do not edit.\n#pragma once\nnamespace hangtrace::embedded {\ninline constexpr const char kDemoJob[] = R\"__HT__(${content})__HT__\";\n}\n")
