"""Line trouble between edgetune and an emulated board, for the serial runner's tests.

Used as a board's flash command: it starts the real board (QEMU, the command after `--`,
with INNER_PORT replaced by a loopback port of its own), listens where edgetune connects,
and forwards bytes both ways, except that it injects one kind of trouble:

  garbage  seeded random bytes (sync bytes included) before and inside frames, both ways
  mute     after the first RUN request reaches the board, nothing comes back from it
  reset    after the first RUN request, the board is killed and booted again (the link stays)
  die      after the first RUN request, the link closes and the proxy exits
  kill     after the first RUN request, the board is killed and the proxy kills itself with
           SIGKILL (an emulated board killed from outside, e.g. by the OOM killer)

With --once-file, trouble happens only for the first launch that creates that file, so a
retried launch behaves. With --launch-dir, launches are numbered (1, 2, ...) through files
in that folder and trouble happens only for those listed in --trouble-on. Everything is bounded: the proxy exits after --limit seconds.
"""
from __future__ import annotations

import argparse
import os
import random
import select
import signal
import socket
import subprocess
import sys
import time

from edgetune.targets.serialproto import FrameParser, MsgType


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Board:
    def __init__(self, command: list[str]):
        self.command, self.process, self.sock = command, None, None

    def start(self, deadline: float) -> None:
        port = free_port()
        args = [arg.replace("INNER_PORT", str(port)) for arg in self.command]
        self.process = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL)
        while time.monotonic() < deadline and self.process.poll() is None:
            try:
                self.sock = socket.create_connection(("127.0.0.1", port), timeout=1)
                self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                return
            except OSError:
                time.sleep(0.02)
        raise SystemExit("uart_proxy: the board did not start")

    def stop(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--listen", type=int, required=True)
    parser.add_argument("--mode", choices=["garbage", "mute", "reset", "die", "kill"], required=True)
    parser.add_argument("--once-file", default="")
    parser.add_argument("--launch-dir", default="")
    parser.add_argument("--trouble-on", default="1", help="comma-separated launch numbers (with --launch-dir)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--limit", type=float, default=60.0)
    parser.add_argument("board", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.board[1:] if args.board[:1] == ["--"] else args.board
    deadline = time.monotonic() + args.limit

    trouble = True
    if args.once_file:
        try:
            os.close(os.open(args.once_file, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            trouble = False
    if args.launch_dir:
        trouble = launch_number(args.launch_dir) in {int(n) for n in args.trouble_on.split(",")}

    listener = socket.create_server(("127.0.0.1", args.listen))
    board = Board(command)
    signal.signal(signal.SIGTERM, lambda *_: (board.stop(), os._exit(0)))
    board.start(deadline)
    listener.settimeout(max(0.1, deadline - time.monotonic()))
    host, _ = listener.accept()
    host.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    rng = random.Random(args.seed)
    requests = FrameParser()
    to_host = to_board = 0  # bytes forwarded so far
    inject_host_at = {3, 200, 700}  # garbage before and inside replies
    inject_board_at = {0, 30, 400}  # garbage before and inside requests
    run_seen = muted = False
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([host, board.sock], [], [], 0.05)
            if host in ready:
                data = host.recv(4096)
                if not data:
                    return 0
                if args.mode == "garbage" and trouble:
                    data = _inject(data, to_board, inject_board_at, rng)
                board.sock.sendall(data)
                to_board += len(data)
                if any(frame.type == MsgType.RUN for frame in requests.feed(data)) and trouble and not run_seen:
                    run_seen = True
                    if args.mode == "mute":
                        muted = True
                    elif args.mode == "reset":
                        board.stop()
                        board.start(deadline)
                        continue
                    elif args.mode == "die":
                        return 0
                    elif args.mode == "kill":
                        board.stop()
                        os.kill(os.getpid(), signal.SIGKILL)
            if board.sock in ready:
                data = board.sock.recv(4096)
                if not data:
                    return 0
                if muted:
                    continue
                if args.mode == "garbage" and trouble:
                    data = _inject(data, to_host, inject_host_at, rng)
                host.sendall(data)
                to_host += len(data)
        return 0
    finally:
        host.close()
        board.stop()


def launch_number(folder: str) -> int:
    """1 for the first launch that numbers itself in `folder`, 2 for the next, ..."""
    n = 1
    while True:
        try:
            os.close(os.open(os.path.join(folder, str(n)), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            return n
        except FileExistsError:
            n += 1


def _inject(data: bytes, position: int, at: set[int], rng: random.Random) -> bytes:
    """Insert a burst of noise (sync bytes and a plausible header among it) wherever the
    stream crosses one of the positions in `at`."""
    for mark in sorted(at):
        if position <= mark < position + len(data) or (mark == 0 and position == 0):
            at.discard(mark)
            cut = mark - position
            noise = bytes(rng.randrange(256) for _ in range(12)) + b"\xe7\x5a\x01\x03\x09\x20\x00" + b"\xe7"
            return data[:cut] + noise + data[cut:]
    return data


if __name__ == "__main__":
    sys.exit(main())
