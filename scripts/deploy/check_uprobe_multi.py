#!/usr/bin/env python3
"""Can this process put a uprobe on LIB:SYMBOL with a BPF uprobe_multi link
(BPF_TRACE_UPROBE_MULTI, kernel 6.6+: no perf_event_open), and does it fire?

  check_uprobe_multi.py LIB SYMBOL
e.g. under the deployment's capabilities without CAP_SYS_ADMIN:
  setpriv --inh-caps=-all,+bpf,+perfmon --ambient-caps=-all,+bpf,+perfmon \
          --bounding-set=-all,+bpf,+perfmon -- \
    python3 check_uprobe_multi.py build/tests/gpu_stubs/libcuda.so.1 cuStreamSynchronize

Kernels with commit ba677dbe77af refuse perf_event_open uprobes (what
hangtrace uses, through libbpf 1.1) without CAP_SYS_ADMIN; docs/deploy.md
records that uprobe_multi links still work with CAP_BPF + CAP_PERFMON there,
which is how the daemon could drop CAP_SYS_ADMIN. The program counts its runs
in an array map; the script calls SYMBOL (a stub safe to call without
arguments) 3 times through ctypes and reads the count. x86_64 only.
"""
import ctypes, os, struct, subprocess, sys
libc = ctypes.CDLL(None, use_errno=True)
SYS_bpf = 321
def bpf(cmd, attr):
    buf = ctypes.create_string_buffer(attr, 160)
    r = libc.syscall(SYS_bpf, cmd, buf, 160)
    return r, ctypes.get_errno(), buf
def insn(code, dst=0, src=0, off=0, imm=0):
    return struct.pack("<BBhi", code, dst | (src << 4), off, imm)
lib_path, symbol = sys.argv[1], sys.argv[2]
out = subprocess.run(["readelf", "-sW", lib_path], capture_output=True, text=True).stdout
vaddr = next(int(l.split()[1], 16) for l in out.splitlines() if l.split()[-1:] == [symbol])
mfd, e, _ = bpf(0, struct.pack("<IIII", 2, 4, 8, 1))            # BPF_MAP_CREATE array[1] of u64
if mfd < 0: print("map create failed:", os.strerror(e)); sys.exit(1)
prog = (insn(0x18, 1, 1, 0, mfd) + insn(0) +                      # r1 = &map
        insn(0x62, 10, 0, -4, 0) + insn(0xbf, 2, 10) + insn(0x07, 2, 0, 0, -4) +
        insn(0x85, 0, 0, 0, 1) +                                  # r0 = lookup(map, &0)
        insn(0x15, 0, 0, 2, 0) + insn(0xb7, 1, 0, 0, 1) +         # if r0: lock *(u64*)r0 += 1
        insn(0xdb, 0, 1, 0, 0) +
        insn(0xb7, 0, 0, 0, 0) + insn(0x95))
ib = ctypes.create_string_buffer(prog); lic = ctypes.create_string_buffer(b"GPL")
attr = struct.pack("<IIQQIIQII16sII", 2, len(prog) // 8, ctypes.addressof(ib), ctypes.addressof(lic),
                   0, 0, 0, 0, 0, b"um_probe", 0, 48)               # kprobe type, BPF_TRACE_UPROBE_MULTI
pfd, e, _ = bpf(5, attr)
if pfd < 0: print("prog load failed:", os.strerror(e)); sys.exit(1)
path = ctypes.create_string_buffer(lib_path.encode()); offs = (ctypes.c_uint64 * 1)(vaddr)
lfd, e, _ = bpf(28, struct.pack("<IIIIQQQQIII", pfd, 0, 48, 0, ctypes.addressof(path),
                                ctypes.addressof(offs), 0, 0, 1, 0, 0))
if lfd < 0: print("uprobe_multi link on %s:%s failed: %s" % (lib_path, symbol, os.strerror(e))); sys.exit(1)
lib = ctypes.CDLL(lib_path)
for _ in range(3): getattr(lib, symbol)()
key = ctypes.c_uint32(0); val = ctypes.c_uint64(0)
r, e, _ = bpf(1, struct.pack("<IIQQ", mfd, 0, ctypes.addressof(key), ctypes.addressof(val)))
print("uprobe_multi link on %s:%s: attached, fired %d time(s) for 3 calls" % (lib_path, symbol, val.value))
