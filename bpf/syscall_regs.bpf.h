/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * A syscall's saved user registers (struct pt_regs), per architecture: its
 * number, its six arguments, whether it is still running. Read by the
 * syscall dispatcher (bpf/syscalls.bpf.c and its concerns) and the task
 * iterator (bpf/task_snapshot.bpf.c). libbpf 1.1 has neither PT_REGS_PARM6
 * nor a syscall-number accessor, hence these.
 *
 * x86_64 is the architecture built and tested (README, Requirements); the
 * arm64 layout is kept so that a port needs only its syscall table
 * (hangtrace/arch/) and a vmlinux.h.
 */
#ifndef HANGTRACE_SYSCALL_REGS_BPF_H
#define HANGTRACE_SYSCALL_REGS_BPF_H

#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>

#include "uapi.bpf.h"

/*
 * A saved user register of the syscall. In the tp_btf twin `regs` is a
 * BTF-typed pointer and this is a plain (fault-checked) load; in the raw_tp
 * twin, and for the task iterator (btf false), it is a probe read. `btf` is
 * a constant after inlining, so each twin keeps one branch.
 */
#define HT_REG(regs, btf, field) ((btf) ? (__u64)(regs)->field : (__u64)BPF_CORE_READ((regs), field))

#if defined(bpf_target_x86)
#define HT_SC_NR(r, btf) ((__s64)HT_REG(r, btf, orig_ax))
/* The number by a probe read that says whether it worked (0), for
 * registers that may be gone (a zombie's). */
#define HT_SC_NR_READ(dst, r) bpf_core_read(dst, sizeof(*(dst)), &(r)->orig_ax)
#define HT_SC_ARG1(r, btf) HT_REG(r, btf, di)
#define HT_SC_ARG2(r, btf) HT_REG(r, btf, si)
#define HT_SC_ARG3(r, btf) HT_REG(r, btf, dx)
#define HT_SC_ARG4(r, btf) HT_REG(r, btf, r10)
#define HT_SC_ARG5(r, btf) HT_REG(r, btf, r8)
#define HT_SC_ARG6(r, btf) HT_REG(r, btf, r9)
/* The saved registers are a syscall's, still running: entry pushes the
 * number as orig_ax and -ENOSYS as ax, which holds until the call returns.
 * An exception entry (a page fault that sleeps) saves its error code as
 * orig_ax -- small numbers that are syscall numbers too (7 is poll) -- and
 * the user's rax as ax. */
#define HT_SC_RUNNING(r, btf) (HT_REG(r, btf, ax) == (__u64)-ENOSYS)
#elif defined(bpf_target_arm64)
#define HT_SC_NR(r, btf) ((__s64)HT_REG(r, btf, syscallno))
#define HT_SC_NR_READ(dst, r) bpf_core_read(dst, sizeof(*(dst)), &(r)->syscallno)
/* x0 is overwritten by the return value; orig_x0 keeps the first argument. */
#define HT_SC_ARG1(r, btf) HT_REG(r, btf, orig_x0)
#define HT_SC_ARG2(r, btf) HT_REG(r, btf, regs[1])
#define HT_SC_ARG3(r, btf) HT_REG(r, btf, regs[2])
#define HT_SC_ARG4(r, btf) HT_REG(r, btf, regs[3])
#define HT_SC_ARG5(r, btf) HT_REG(r, btf, regs[4])
#define HT_SC_ARG6(r, btf) HT_REG(r, btf, regs[5])
/* Every exception entry but a syscall's saves NO_SYSCALL (-1) as syscallno. */
#define HT_SC_RUNNING(r, btf) (HT_SC_NR(r, btf) >= 0)
#else
#error "syscall_regs.bpf.h: syscall register layout unknown for this arch (x86_64 only, README: Requirements)"
#endif

#endif /* HANGTRACE_SYSCALL_REGS_BPF_H */
