"""A DataLoader worker stuck in getaddrinfo() against a resolver that never answers.

Field report shape: a dataset resolves its storage host in __getitem__
(socket.getaddrinfo, requests, boto3...); the node's resolver -- a local
stub such as systemd-resolved on 127.0.0.53, dnsmasq, a sidecar -- reads the
queries and never answers. With "options timeout:30 attempts:5" in
resolv.conf, glibc waits in poll() for minutes; the main process waits for
the batch.

  dns_lookup_hang.py resolver ADDR
      Binds UDP and TCP ADDR:53, reads every query and never answers. Prints
      "LISTENING pid=<pid> addr=<ADDR>" once bound, and "QUERY pid=<pid>
      bytes=<n>" for each datagram it reads. Its own process, not part of the
      job (the tests run it as root: port 53).
  dns_lookup_hang.py train
      The training job: DataLoader(num_workers=1) whose dataset looks up
      dataset.example.internal:443 for each sample. Prints "READY main=<pid>
      workers=<pid>" right before next() blocks. Run it in a mount namespace
      whose /etc/resolv.conf names the resolver.
"""
import os
import select
import socket
import sys


def resolver(addr):
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind((addr, 53))
    tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    tcp.bind((addr, 53))
    tcp.listen(16)
    print("LISTENING pid=%d addr=%s" % (os.getpid(), addr), flush=True)
    clients = []                      # kept open, never answered
    while True:
        ready, _, _ = select.select([udp, tcp] + clients, [], [])
        for s in ready:
            if s is udp:
                data, _ = udp.recvfrom(4096)
                print("QUERY pid=%d bytes=%d" % (os.getpid(), len(data)), flush=True)
            elif s is tcp:
                conn, _ = tcp.accept()
                clients.append(conn)
            elif not s.recv(4096):
                clients.remove(s)
                s.close()


def train():
    import torch
    from torch.utils.data import DataLoader, Dataset

    class RemoteShards(Dataset):
        def __len__(self):
            return 64

        def __getitem__(self, index):
            # No address cached: one lookup per sample, in the worker.
            infos = socket.getaddrinfo("dataset.example.internal", 443, proto=socket.IPPROTO_TCP)
            return torch.tensor([index, len(infos)])

    loader = DataLoader(RemoteShards(), batch_size=2, num_workers=1, multiprocessing_context="fork")
    batches = iter(loader)
    workers = ",".join(str(w.pid) for w in batches._workers)
    print("READY main=%d workers=%s" % (os.getpid(), workers), flush=True)
    for batch in batches:
        print("BATCH", batch.shape, flush=True)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "resolver":
        resolver(sys.argv[2])
    elif len(sys.argv) == 2 and sys.argv[1] == "train":
        train()
    else:
        sys.exit("usage: dns_lookup_hang.py resolver ADDR | train")
