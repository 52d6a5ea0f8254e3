/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The uapi constants more than one BPF program needs: vmlinux.h cannot carry
 * them (BTF has no macros) and the uapi headers clash with it, so they are
 * written once here, with the values of <asm-generic/errno-base.h>,
 * <asm-generic/errno.h> and <asm-generic/signal.h> (x86_64 and arm64 alike).
 * A constant one concern alone needs stays in that concern's file; hangtrace's
 * own vocabulary is in hangtrace/abi.h.
 */
#ifndef HANGTRACE_UAPI_BPF_H
#define HANGTRACE_UAPI_BPF_H

/* errno (libbpf's usdt.bpf.h brings <linux/errno.h> along, hence #ifndef) */
#ifndef ENOENT
#define ENOENT 2
#endif
#ifndef EEXIST
#define EEXIST 17
#endif
#ifndef ENOSPC
#define ENOSPC 28
#endif
#ifndef ETIMEDOUT
#define ETIMEDOUT 110
#endif
#ifndef ENOSYS
#define ENOSYS 38
#endif

/* signals and si_code */
#define SIGBUS 7
#define SIGCHLD 17
#define SIGURG 23
#define SIGWINCH 28
#define SI_USER 0
#define SI_KERNEL 0x80

#endif /* HANGTRACE_UAPI_BPF_H */
