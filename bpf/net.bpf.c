// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * TCP sockets of traced tasks: state changes (connect results included:
 * SYN_SENT -> ESTABLISHED or -> CLOSE) and retransmits, as struct
 * ht_tcp_event records.
 *
 * Most of these fire in softirq context, where `current` is whoever the
 * packet interrupted, not the socket's owner. So ownership is claimed only on
 * transitions a socket's owner makes itself, in process context (connect ->
 * SYN_SENT, listen -> LISTEN, close -> FIN_WAIT1/LAST_ACK), and remembered
 * by socket address in `traced_socks`; a connection accepted on a traced
 * listener inherits the listener's owner through its (netns, port). Every
 * other event is streamed only for sockets in that map, attributed to the
 * owner recorded there.
 *
 * Sockets the traced processes already had open when tracing started (a job
 * attached to while it hangs in connect() or recv()) make no such transition
 * while they hang; userspace lists them by socket inode in `open_socks` just
 * after attaching (from /proc/PID/fd), and the first event of such a socket
 * (a retransmit, a state change in softirq) adopts it into `traced_socks`.
 */
#include "vmlinux.h"

#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "live_maps.bpf.h"

#define AF_INET 2
#define AF_INET6 10
/* IPPROTO_TCP and the TCP_* states (include/net/tcp_states.h) are enums of
 * vmlinux.h. */

struct sock_owner {
  __u32 tgid;
  __u32 tid;
  char comm[HT_COMM_LEN];
  /* The socket's endpoints as last seen: connect() enters SYN_SENT before
   * the local port is bound, and the move to CLOSE releases the port before
   * the tracepoint fires, so events fill their gaps from here. */
  __u16 sport;
  __u16 dport;
  __u8 saddr[16];
  __u8 daddr[16];
};

/* Key: the struct sock address. LRU: a socket that vanished without a CLOSE
 * transition must not pin its slot forever. */
struct {
  __uint(type, BPF_MAP_TYPE_LRU_HASH);
  __uint(max_entries, 16384);
  __type(key, __u64);
  __type(value, struct sock_owner);
} traced_socks SEC(".maps");

struct listen_key {
  __u32 netns; /* network namespace inode */
  __u16 family;
  __u16 port; /* host order */
};

struct {
  __uint(type, BPF_MAP_TYPE_LRU_HASH);
  __uint(max_entries, 1024);
  __type(key, struct listen_key);
  __type(value, struct sock_owner);
} traced_listeners SEC(".maps");

/* What userspace knows of an open socket's owner: struct ht_sock_owner in
 * userspace/collect/live_net.cpp. */
struct open_sock_owner {
  __u32 tgid;
  __u32 tid;
  char comm[HT_COMM_LEN];
};

/* Key: the socket's inode number (sockfs: unique while the socket lives). */
struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 16384);
  __type(key, __u64);
  __type(value, struct open_sock_owner);
} open_socks SEC(".maps");

static __always_inline struct listen_key listen_key_of(const struct sock* sk) {
  struct listen_key k = {};
  k.netns = BPF_CORE_READ(sk, __sk_common.skc_net.net, ns.inum);
  k.family = BPF_CORE_READ(sk, __sk_common.skc_family);
  k.port = BPF_CORE_READ(sk, __sk_common.skc_num);
  return k;
}

static __always_inline bool is_tcp(const struct sock* sk) {
  return BPF_CORE_READ(sk, sk_protocol) == IPPROTO_TCP;
}

static __always_inline void current_owner(struct sock_owner* o) {
  __u64 id = bpf_get_current_pid_tgid();
  o->tgid = id >> 32;
  o->tid = (__u32)id;
  bpf_get_current_comm(o->comm, sizeof(o->comm));
}

static __always_inline bool all_zero(const __u8* a) {
  __u64 lo, hi;
  __builtin_memcpy(&lo, a, 8);
  __builtin_memcpy(&hi, a + 8, 8);
  return (lo | hi) == 0;
}

/* `owner` points into traced_socks: its remembered endpoints are updated. */
static __always_inline void emit(__u32 type, const struct sock* sk, struct sock_owner* owner, int oldstate,
                                 int newstate, __u64 cookie) {
  struct ht_tcp_event* e = ht_reserve(type, sizeof(*e));
  if (!e) return;
  e->hdr.tgid = owner->tgid;
  e->hdr.tid = owner->tid;
  __builtin_memcpy(e->hdr.comm, owner->comm, sizeof(e->hdr.comm));
  e->family = BPF_CORE_READ(sk, __sk_common.skc_family);
  e->sport = BPF_CORE_READ(sk, __sk_common.skc_num);
  e->dport = bpf_ntohs(BPF_CORE_READ(sk, __sk_common.skc_dport));
  e->pad = 0;
  __builtin_memset(e->saddr, 0, sizeof(e->saddr));
  __builtin_memset(e->daddr, 0, sizeof(e->daddr));
  /* Explicit sizes: BPF_CORE_READ_INTO would copy sizeof(__u8). */
  if (e->family == AF_INET) {
    bpf_core_read(e->saddr, 4, &sk->__sk_common.skc_rcv_saddr);
    bpf_core_read(e->daddr, 4, &sk->__sk_common.skc_daddr);
  } else if (e->family == AF_INET6 && bpf_core_field_exists(sk->__sk_common.skc_v6_daddr)) {
    bpf_core_read(e->saddr, 16, &sk->__sk_common.skc_v6_rcv_saddr);
    bpf_core_read(e->daddr, 16, &sk->__sk_common.skc_v6_daddr);
  }
  if (e->sport)
    owner->sport = e->sport;
  else
    e->sport = owner->sport;
  if (e->dport)
    owner->dport = e->dport;
  else
    e->dport = owner->dport;
  if (!all_zero(e->saddr))
    __builtin_memcpy(owner->saddr, e->saddr, 16);
  else
    __builtin_memcpy(e->saddr, owner->saddr, 16);
  if (!all_zero(e->daddr))
    __builtin_memcpy(owner->daddr, e->daddr, 16);
  else
    __builtin_memcpy(e->daddr, owner->daddr, 16);
  e->oldstate = oldstate;
  e->newstate = newstate;
  e->sock_cookie = cookie;
  ht_submit(e);
}

/* A socket a traced process had open when tracing started: adopted into
 * traced_socks (endpoints filled in by its first event); NULL otherwise. */
static __always_inline struct sock_owner* adopt_open_sock(const struct sock* sk) {
  __u64 ino = BPF_CORE_READ(sk, sk_socket, file, f_inode, i_ino);
  if (!ino) return NULL;
  struct open_sock_owner* known = bpf_map_lookup_elem(&open_socks, &ino);
  if (!known) return NULL;
  struct sock_owner o = {};
  o.tgid = known->tgid;
  o.tid = known->tid;
  __builtin_memcpy(o.comm, known->comm, sizeof(o.comm));
  __u64 key = (__u64)sk;
  bpf_map_update_elem(&traced_socks, &key, &o, BPF_NOEXIST);
  return bpf_map_lookup_elem(&traced_socks, &key);
}

/* The socket's owner when it is a traced socket (claiming it first when this
 * transition is one its owner makes in process context); NULL otherwise. */
static __always_inline struct sock_owner* owner_of(const struct sock* sk, int oldstate, int newstate) {
  __u64 key = (__u64)sk;
  struct sock_owner* owner = bpf_map_lookup_elem(&traced_socks, &key);
  if (owner) return owner;

  struct sock_owner o = {};
  if ((newstate == TCP_SYN_SENT || newstate == TCP_LISTEN || newstate == TCP_FIN_WAIT1 ||
       newstate == TCP_LAST_ACK) &&
      ht_current_traced()) {
    current_owner(&o);
    if (newstate == TCP_LISTEN) {
      struct listen_key lk = listen_key_of(sk);
      bpf_map_update_elem(&traced_listeners, &lk, &o, BPF_ANY);
    }
  } else if (oldstate == TCP_LISTEN && newstate == TCP_SYN_RECV) {
    /* A child cloned from its listener in softirq: same local port. */
    struct listen_key lk = listen_key_of(sk);
    struct sock_owner* l = bpf_map_lookup_elem(&traced_listeners, &lk);
    if (!l) return NULL;
    o.tgid = l->tgid;
    o.tid = l->tid;
    __builtin_memcpy(o.comm, l->comm, sizeof(o.comm));
  } else {
    return adopt_open_sock(sk);
  }
  bpf_map_update_elem(&traced_socks, &key, &o, BPF_ANY);
  return bpf_map_lookup_elem(&traced_socks, &key);
}

/* `btf`: a constant, so the raw_tp twin never contains the helper call the
 * raw_tp program type does not allow. */
static __always_inline __u64 sock_cookie(const struct sock* sk, bool btf) {
  if (btf) return bpf_get_socket_cookie((void*)sk);
  /* Assigned lazily: 0 until something (sock_diag, a BPF program) asks. */
  return BPF_CORE_READ(sk, __sk_common.skc_cookie.counter);
}

static __always_inline int handle_set_state(const struct sock* sk, int oldstate, int newstate, bool btf) {
  if (!sk || !is_tcp(sk)) return 0;
  struct sock_owner* owner = owner_of(sk, oldstate, newstate);
  if (!owner) return 0;
  emit(HT_EV_TCP_STATE, sk, owner, oldstate, newstate, sock_cookie(sk, btf));
  if (newstate == TCP_CLOSE) {
    __u64 key = (__u64)sk;
    bpf_map_delete_elem(&traced_socks, &key);
    if (oldstate == TCP_LISTEN) {
      struct listen_key lk = listen_key_of(sk);
      bpf_map_delete_elem(&traced_listeners, &lk);
    }
  }
  return 0;
}

SEC("tp_btf/inet_sock_set_state")
int BPF_PROG(net_set_state_btf, const struct sock* sk, const int oldstate, const int newstate) {
  return handle_set_state(sk, oldstate, newstate, true);
}

SEC("raw_tp/inet_sock_set_state")
int BPF_PROG(net_set_state_raw, const struct sock* sk, const int oldstate, const int newstate) {
  return handle_set_state(sk, oldstate, newstate, false);
}

static __always_inline int handle_retransmit(const struct sock* sk, bool btf) {
  if (!sk) return 0;
  __u64 key = (__u64)sk;
  struct sock_owner* owner = bpf_map_lookup_elem(&traced_socks, &key);
  if (!owner) owner = adopt_open_sock(sk);
  if (!owner) return 0;
  int state = BPF_CORE_READ(sk, __sk_common.skc_state);
  /* Both states are the socket's state when it retransmitted. */
  emit(HT_EV_TCP_RETRANSMIT, sk, owner, state, state, sock_cookie(sk, btf));
  return 0;
}

SEC("tp_btf/tcp_retransmit_skb")
int BPF_PROG(net_retransmit_btf, const struct sock* sk, const struct sk_buff* skb) {
  return handle_retransmit(sk, true);
}

SEC("raw_tp/tcp_retransmit_skb")
int BPF_PROG(net_retransmit_raw, const struct sock* sk, const struct sk_buff* skb) {
  return handle_retransmit(sk, false);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
