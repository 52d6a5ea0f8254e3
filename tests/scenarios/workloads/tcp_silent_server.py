"""A DataLoader worker stuck in recv() on a server that never answers.

Field report shape: a dataset streams samples from a storage/HTTP service in
__getitem__ with a socket that has no timeout; the service accepted the
connection but stopped responding. The worker waits in recv() forever, the
main process waits for the batch.

  tcp_silent_server.py serve
      Listens on 127.0.0.1 (ephemeral port), accepts every connection and
      never sends a byte. Prints "LISTENING pid=<pid> port=<port>".
      Start it as its own process (it is not part of the training job).
  tcp_silent_server.py train --port N
      The training job: DataLoader(num_workers=1) whose dataset fetches each
      sample from 127.0.0.1:N. Prints "READY main=<pid> workers=<pid>
      port=<N>" right before next() blocks.
"""
import os
import socket
import sys


def serve():
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    print("LISTENING pid=%d port=%d" % (os.getpid(), srv.getsockname()[1]), flush=True)
    clients = []                       # kept open, never written to
    while True:
        conn, _ = srv.accept()
        clients.append(conn)


def train(port):
    import torch
    from torch.utils.data import DataLoader, Dataset

    class RemoteShardDataset(Dataset):
        def __init__(self, port):
            self.port = port
            self.sock = None           # one connection per worker, made lazily

        def __len__(self):
            return 64

        def __getitem__(self, index):
            if self.sock is None:
                self.sock = socket.create_connection(("127.0.0.1", self.port))
            self.sock.sendall(b"GET /shard/%d\n" % index)
            header = self.sock.recv(4096)  # no timeout: blocks forever
            return torch.frombuffer(bytearray(header.ljust(8, b"\0")[:8]), dtype=torch.uint8)

    loader = DataLoader(RemoteShardDataset(port), batch_size=2, num_workers=1,
                        multiprocessing_context="fork")
    batches = iter(loader)
    workers = ",".join(str(w.pid) for w in batches._workers)
    print("READY main=%d workers=%s port=%d" % (os.getpid(), workers, port), flush=True)
    for batch in batches:
        print("BATCH", batch.shape, flush=True)


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "serve":
        serve()
    elif len(sys.argv) >= 4 and sys.argv[1] == "train" and sys.argv[2] == "--port":
        train(int(sys.argv[3]))
    else:
        sys.exit("usage: tcp_silent_server.py serve | train --port N")
