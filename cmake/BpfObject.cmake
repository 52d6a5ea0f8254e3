# CO-RE BPF objects: clang -target bpf, then bpftool gen skeleton.
# vmlinux.h comes from the running kernel's BTF; without BTF the committed
# copy for the architecture (bpf/vmlinux/<arch>/) is used (CO-RE relocates it
# on the target kernel anyway). CMakeLists.txt accepts x86_64 alone.
find_program(BPFTOOL_EXE NAMES bpftool PATHS /usr/sbin /usr/local/sbin REQUIRED)
find_program(BPF_CLANG_EXE NAMES clang clang-14 clang-15 clang-16 REQUIRED)

set(HANGTRACE_BPF_OUT_DIR ${CMAKE_BINARY_DIR}/bpf)
file(MAKE_DIRECTORY ${HANGTRACE_BPF_OUT_DIR})
set(HANGTRACE_VMLINUX_H ${HANGTRACE_BPF_OUT_DIR}/vmlinux.h)
set(HANGTRACE_VMLINUX_FALLBACK ${PROJECT_SOURCE_DIR}/bpf/vmlinux/${CMAKE_SYSTEM_PROCESSOR}/vmlinux.h)

# A script rather than an inline `sh -c`: CMake would split the command at
# its semicolons.
set(_ht_gen_vmlinux ${HANGTRACE_BPF_OUT_DIR}/gen_vmlinux.sh)
file(WRITE ${_ht_gen_vmlinux} "#!/bin/sh
out=\"$1\"
fallback=\"$2\"
if [ -r /sys/kernel/btf/vmlinux ] && \"${BPFTOOL_EXE}\" btf dump file /sys/kernel/btf/vmlinux format c > \"$out.tmp\" 2>/dev/null; then
  mv \"$out.tmp\" \"$out\"
else
  rm -f \"$out.tmp\"
  echo 'hangtrace: no kernel BTF at build time, using the committed ${CMAKE_SYSTEM_PROCESSOR} vmlinux.h'
  cp \"$fallback\" \"$out\"
fi
")
add_custom_command(
  OUTPUT ${HANGTRACE_VMLINUX_H}
  COMMAND sh ${_ht_gen_vmlinux} ${HANGTRACE_VMLINUX_H} ${HANGTRACE_VMLINUX_FALLBACK}
  DEPENDS ${HANGTRACE_VMLINUX_FALLBACK}
  COMMENT "Generating vmlinux.h"
  VERBATIM)

# libbpf's name for the architecture (bpf_tracing.h: __TARGET_ARCH_x86), which
# also picks the syscall table (hangtrace/syscall_nr.h). arm64 would be
# aarch64 -> arm64.
set(HANGTRACE_BPF_ARCH_x86_64 x86)
set(HANGTRACE_BPF_ARCH ${HANGTRACE_BPF_ARCH_${CMAKE_SYSTEM_PROCESSOR}})

# libbpf's usdt.bpf.h includes <linux/errno.h>, which wants <asm/errno.h>
# from the host's multiarch directory; -target bpf does not look there.
set(HANGTRACE_BPF_SYS_INCLUDES)
execute_process(COMMAND ${CMAKE_C_COMPILER} -print-multiarch OUTPUT_VARIABLE _ht_multiarch
                OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
if(_ht_multiarch AND EXISTS /usr/include/${_ht_multiarch}/asm)
  set(HANGTRACE_BPF_SYS_INCLUDES -idirafter /usr/include/${_ht_multiarch})
endif()

function(hangtrace_bpf_object src out_skel)
  get_filename_component(name ${src} NAME_WE)   # task_snapshot.bpf.c -> task_snapshot
  set(obj ${HANGTRACE_BPF_OUT_DIR}/${name}.bpf.o)
  set(skel ${HANGTRACE_BPF_OUT_DIR}/${name}.skel.h)
  add_custom_command(
    OUTPUT ${obj}
    # -mcpu=v3: atomic exchange (the wake batches' flush) needs it; the
    # kernels these programs load on (bpf_task_pt_regs: 5.15+) all have it.
    # -MD: the headers it includes (bpf/*.bpf.h, include/hangtrace/...) are
    # its dependencies.
    COMMAND ${BPF_CLANG_EXE} -g -O2 -target bpf -mcpu=v3 -D__TARGET_ARCH_${HANGTRACE_BPF_ARCH}
            -I${HANGTRACE_BPF_OUT_DIR} -I${PROJECT_SOURCE_DIR}/include -I${PROJECT_SOURCE_DIR}/bpf
            ${HANGTRACE_BPF_SYS_INCLUDES}
            -Wall -Werror -MD -MF ${obj}.d -c ${src} -o ${obj}
    DEPENDS ${src} ${HANGTRACE_VMLINUX_H}
    DEPFILE ${obj}.d
    COMMENT "BPF ${name}.bpf.c")
  add_custom_command(
    OUTPUT ${skel}
    COMMAND ${BPFTOOL_EXE} gen skeleton ${obj} name ${name}_bpf > ${skel}.tmp
    COMMAND ${CMAKE_COMMAND} -E rename ${skel}.tmp ${skel}
    DEPENDS ${obj}
    COMMENT "Skeleton ${name}.skel.h")
  set(${out_skel} ${skel} PARENT_SCOPE)
endfunction()
