/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Syscall numbers, for BPF C and C++ alike: HT_NR_<name> for every syscall
 * of the architecture's table (hangtrace/arch/<arch>/syscalls.h), the only
 * place a number is written. Records carry the numbers of the architecture
 * hangtrace was built for (ht_syscall_event.nr, ht_task_record.syscall_nr).
 *
 * x86_64 is the one architecture built and tested (README, Requirements);
 * arm64 would add hangtrace/arch/aarch64/syscalls.h, picked below for
 * __TARGET_ARCH_arm64 and __aarch64__.
 */
#ifndef HANGTRACE_SYSCALL_NR_H
#define HANGTRACE_SYSCALL_NR_H

/* BPF objects are built with -D__TARGET_ARCH_<arch> (cmake/BpfObject.cmake),
 * C++ by a compiler for the arch itself. */
#if defined(__BPF__)
#if defined(__TARGET_ARCH_x86)
#include "hangtrace/arch/x86_64/syscalls.h"
#else
#error "hangtrace/syscall_nr.h: no syscall table for this BPF target arch (x86_64 only, README: Requirements)"
#endif
#elif defined(__x86_64__)
#include "hangtrace/arch/x86_64/syscalls.h"
#else
#error "hangtrace/syscall_nr.h: no syscall table for this arch (x86_64 only, README: Requirements)"
#endif

#define HT_NR_ENUMERATOR(name, nr, wait, kind, shm) HT_NR_##name = (nr),
enum ht_syscall_nr { HT_SYSCALLS(HT_NR_ENUMERATOR) };
#undef HT_NR_ENUMERATOR

#endif /* HANGTRACE_SYSCALL_NR_H */
