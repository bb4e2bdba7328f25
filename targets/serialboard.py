"""Boards reached over a serial port: build the serial harness, flash it with the board's own
command, and measure through the edgetune serial protocol (docs/serial-protocol.md).

The same code drives a real board (`port = "/dev/ttyACM0"`, `flash = ["pyocd", ...]`) and
the emulated AN547 (`flash` starts QEMU with UART0 on a loopback TCP port, `port =
"socket://127.0.0.1:{port}"`): only the board's TOML differs.

Failure handling, per trial:
- the kernel faults: the board says so (ERROR FAULT) and resets itself -> a CRASH trial;
- no RUN_DONE in time: if the board still answers a HELLO it was reset under us, and the
  trial is measured again from LOAD; if it does not, the kernel hangs -> a TIMEOUT trial;
- the port closes (the emulator died, the adapter vanished): flash and start again;
- at most `retries` repeats; then a failed trial saying what happened each time: DEVICE_LOST
  when the last attempt lost its link (EMULATOR_LOST when the board is an emulator that was
  killed by a signal from outside), and DEVICE_LOST too when the port is gone on a retry.
The port missing or busy before a trial starts is not that trial's fault: PortUnavailable
(naming the port) stops the session.
"""
from __future__ import annotations

import hashlib
import os
import socket
import subprocess
import threading
import time
from pathlib import Path

import serial

from edgetune.codegen import KernelIO
from edgetune.firmware import COMMON_DIR
from edgetune.hal import Placement, Target
from edgetune.hal.loader import RUNNER_KINDS
from edgetune.tuner import Outcome

from . import iobuf
from .batch import as_table
from .build import Runner
from .image import HARNESS_CFLAGS, link_image, linker_script, placement_info
from .seriallink import BoardLink, BoardRefused, BoardReset, LinkClosed, LinkError, LinkTimeout
from .serialproto import Cycles, ErrorCode, Hello, ProtocolError
from .toolchain import (BuildResult, MeasureError, ToolMissing, cached_object, killed_from_outside, require_program,
                        run_tool, tool_version)

UART_SOURCES = {"cmsdk-apb": "uart_cmsdk.c"}  # one polled driver per UART family
CONNECT_POLL_S = 0.02
STOP_GRACE_S = 2.0
LOST_GRACE_S = 1.0


class PortUnavailable(ToolMissing):
    """The board's serial port is absent or held by another program."""


def free_loopback_port(taken: set[int] = frozenset()) -> int:
    """A loopback port nothing listens on now (and that is not in `taken`)."""
    for _ in range(100):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        if port not in taken:
            return port
    raise OSError("no free loopback port")


def substitute(args: tuple[str, ...], image: Path, port: int | None) -> list[str]:
    """The flash command with its placeholders filled (validated by the HAL loader)."""
    out = []
    for arg in args:
        arg = arg.replace("{image}", str(image))
        if port is not None:
            arg = arg.replace("{port}", str(port))
        out.append(arg)
    return out


def open_port(url: str, baudrate: int, timeout_s: float):
    """Open a device or pyserial URL; a device is locked for exclusive use."""
    options = dict(baudrate=baudrate, timeout=timeout_s, write_timeout=timeout_s)
    if "://" not in url:
        options["exclusive"] = True
    return serial.serial_for_url(url, **options)


def port_problem(url: str, exc: Exception) -> PortUnavailable:
    if "://" not in url and not os.path.exists(url):
        return PortUnavailable(f"serial port {url} is absent: no such device (is the board connected?)")
    return PortUnavailable(f"serial port {url} could not be opened (busy, locked by another program, or "
                           f"not permitted): {exc}")


class SerialRunner(Runner):
    """A board over a serial link, real or emulated (its flash command starts QEMU)."""

    kind = "serial"
    measures = RUNNER_KINDS[kind].measures
    builds_with_clock = True
    # 2: the serial harness calls the variant through the variant table (batched evaluation),
    # which moves its SysTick count by a few ticks against harness 1's images.
    harness_version = 2

    def __init__(self, target: Target):
        if target.firmware is None or target.serial is None:
            raise ValueError(f"target {target.name} needs [firmware] and [serial] tables for a serial runner")
        super().__init__(target)
        # Ports handed to boards still running: two trials started at once must not be
        # given the same port (one would then talk to the other's board).
        self._ports: set[int] = set()
        self._ports_lock = threading.Lock()

    @classmethod
    def default_tolerance_pct(cls, target: Target) -> float:
        if target.serial is not None and target.serial.flash_keeps_running:
            return 0.0  # the flash command is the board: an emulator, counting deterministically
        # A real board counts real cycles (DWT, the minimum of several runs), which caches and
        # bus contention move slightly: 2% is a starting point, not a measurement (no real
        # board was at hand); pass --tolerance for your board.
        return 2.0

    def slots(self) -> int:
        # An emulated board on a loopback port per run can run beside itself; a physical
        # board is one device.
        return max(1, os.cpu_count() or 1) if "{port}" in self.target.serial.port else 1

    # --- tools --------------------------------------------------------------------------------
    def check_tools(self) -> None:
        require_program(self.target.firmware.linker)
        for compiler in self.target.compilers:
            require_program(compiler.command)
        self._check_flash_tool()
        link = self.target.serial
        if "{port}" not in link.port:
            try:
                open_port(link.port, link.baudrate, link.reply_timeout_s).close()
            except (serial.SerialException, OSError, ValueError) as exc:
                raise port_problem(link.port, exc) from None

    def _check_flash_tool(self) -> None:
        require_program(self.target.serial.flash[0], hint="the board's [serial].flash command needs it")

    # --- build --------------------------------------------------------------------------------
    def link(self, workdir: Path, objects: list[Path], glue_text: str, io: KernelIO,
             placement: Placement | None = None) -> BuildResult:
        target, fw, link = self.target, self.target.firmware, self.target.serial
        plan = iobuf.plan_io(target, io, placement)
        # Each variant's block is loaded into the board's one I/O area in turn: the table's
        # segment addresses are the area's.
        (workdir / "glue.c").write_text(as_table(glue_text, [target.io_address(region) for region in plan.regions]))
        (workdir / "link.ld").write_text(linker_script(target))
        harness_cc = [fw.linker, *fw.ldflags, *HARNESS_CFLAGS, "-I", str(COMMON_DIR)]
        defines = [define for index, region in enumerate(plan.regions)
                   for define in (f"-DET_IO_BASE{index or ''}={target.io_address(region):#x}",
                                  f"-DET_IO_CAPACITY{index or ''}={target.io_capacity(region):#x}")]
        defines += [f"-DET_UART_BASE={link.uart_base:#x}", f"-DET_UART_BAUDDIV={link.bauddiv}",
                   f'-DET_BOARD_NAME="{target.name}"', f"-DET_CORE_HZ={target.core.clock_hz}u",
                   f"-DET_COUNTER_DWT={1 if link.counter == 'dwt' else 0}"]
        harness = [cached_object(target.name, COMMON_DIR / f"startup_{fw.startup}.c", harness_cc),
                   cached_object(target.name, COMMON_DIR / "semihost.c", harness_cc),
                   cached_object(target.name, COMMON_DIR / UART_SOURCES[link.uart], [*harness_cc, *defines]),
                   cached_object(target.name, COMMON_DIR / "harness_serial.c", [*harness_cc, *defines])]
        run_tool([*harness_cc, "-c", "glue.c", "-o", "glue.o"], cwd=workdir, outcome=Outcome.RUNTIME_ERROR)
        image_id = _image_id(objects, glue_text)
        link_image(target, workdir, objects, harness, [f"-Wl,--defsym=et_image_id={image_id:#x}", "-lc", "-lgcc"])
        return BuildResult(path=workdir / "image.elf", workdir=workdir,
                           info={**placement_info(plan), "image_id": f"{image_id:#010x}",
                                 "flash_tool": tool_version(link.flash[0]) if link.flash else ""},
                           placement=Placement(plan.region_of("weights"), plan.region_of("activations")))

    # --- run ----------------------------------------------------------------------------------
    def run(self, build: BuildResult, io: KernelIO, timeout_s: float | None = None) -> tuple[dict, bytes]:
        link = self.target.serial
        timeout = timeout_s or self.target.runner.timeout_s
        history: list[str] = []
        lost: Outcome | None = None  # how the last attempt lost its board, if it did
        for attempt in range(link.retries + 1):
            try:
                board = self._start_board(build)
            except PortUnavailable as exc:
                if attempt == 0:
                    raise  # absent before this trial began: not the trial's fault, the session stops
                # It vanished under this trial (its link closed or it reset, and now the port is gone).
                raise MeasureError(Outcome.DEVICE_LOST, "; ".join([*history, str(exc)])) from None
            lost = None
            try:
                values, raw = self._measure(board, build, io, timeout, history)
                values_info = {"serial_attempts": attempt + 1, "serial_retransmissions": board.link.retransmissions}
                return {**values, **values_info}, raw
            except LinkClosed as exc:
                lost = board.lost()
                history.append(f"attempt {attempt + 1}: {exc}"
                               + (f" (the emulated board was killed by signal {-board.process.returncode})"
                                  if lost is Outcome.EMULATOR_LOST else ""))
            except BoardReset as exc:
                history.append(f"attempt {attempt + 1}: {exc}")
            except LinkTimeout as exc:
                history.append(f"attempt {attempt + 1}: {exc}")
                if attempt == link.retries:
                    raise MeasureError(Outcome.TIMEOUT, f"board at {board.url} stopped answering: "
                                       + "; ".join(history)) from None
            except (LinkError, ProtocolError) as exc:  # another protocol version, a malformed reply
                raise MeasureError(Outcome.RUNTIME_ERROR, f"{board.url}: {exc}") from None
            finally:
                board.stop()
        raise MeasureError(lost or Outcome.RUNTIME_ERROR, f"no complete measurement in {link.retries + 1} attempts: "
                           + "; ".join(history))

    batches = True

    def run_batch(self, build: BuildResult, ios: list[KernelIO], timeout_s: float):
        """One flash for the image's variants: each measured in turn on the running board.
        Whatever goes wrong stops the batch at that variant (which the session then measures
        alone, with every retry `run` makes)."""
        done: list[tuple[dict, bytes]] = []
        history: list[str] = []
        try:
            board = self._start_board(build)
        except PortUnavailable:
            raise  # absent before this image began: the session stops
        except MeasureError as exc:
            return done, exc
        try:
            for variant, io in enumerate(ios):
                values, raw = self._measure(board, build, io, timeout_s, history, variant)
                done.append(({**values, "serial_attempts": 1,
                              "serial_retransmissions": board.link.retransmissions}, raw))
        except MeasureError as exc:
            return done, exc
        except (LinkClosed, BoardReset, LinkTimeout, LinkError, ProtocolError) as exc:
            return done, MeasureError(Outcome.RUNTIME_ERROR, f"{board.url}: {exc}")
        finally:
            board.stop()
        return done, None

    def _measure(self, board: "_Board", build: BuildResult, io: KernelIO, timeout: float,
                 history: list[str], variant: int = 0) -> tuple[dict, bytes]:
        link, ser = board.link, self.target.serial
        plan = iobuf.plan_io(self.target, io, build.placement)
        segments = iobuf.pack_segments(io, plan)
        # The board's I/O area: its segments one after the other (harness_serial.c).
        starts = [sum(self.target.io_capacity(r) for r in plan.regions[:i]) for i in range(len(plan.regions))]
        offsets = iobuf.layout(io, plan)
        resets = 0
        for tries in range(ser.retries + 1):  # a board reset mid-run: measure again from LOAD
            # Right after flashing, the board may still be booting (or an emulator starting).
            hello = link.hello(patience_s=ser.flash_timeout_s if tries == 0 else 0.0)
            self._check_hello(hello, build, starts[-1] + len(segments[-1]), board.url)
            try:
                for start, data, end in zip(starts, segments, iobuf.input_ends(io, plan)):
                    link.load(data[:end], base_offset=start)  # the board zeroes output buffers itself
                link.run(ser.runs, timeout, variant)
                raw = b"".join(link.read(starts[segment] + offset, buf.data.nbytes)
                               for buf, segment, offset in zip(io.buffers, plan.segment_of, offsets) if buf.is_output)
                cycles = link.cycles()
            except BoardReset as exc:
                history.append(str(exc))
                resets += 1
                continue
            except BoardRefused as exc:
                if exc.error.code in (ErrorCode.BAD_IO, ErrorCode.NOT_RUN) and self._session_lost(link):
                    history.append(f"{board.url}: the board was reset between requests")
                    resets += 1
                    continue
                raise self._refusal(exc.error.code, exc) from None
            except LinkTimeout:
                hello = link.probe()
                if hello is None:
                    why = ("the kernel started and never finished: it hangs" if link.run_started
                           else "it stopped answering")
                    raise MeasureError(Outcome.TIMEOUT, f"no result within {timeout:.1f} s and the board at "
                                       f"{board.url} no longer answers: {why}") from None
                if hello.previous_session != link.session:
                    resets += 1
                history.append(f"{board.url}: a reply was lost; the board answers again, measuring again")
                continue
            return {**self._values(cycles), "serial_resets": resets}, raw
        raise BoardReset(f"the board at {board.url} was reset or lost replies in every try")

    @staticmethod
    def _session_lost(link: BoardLink) -> bool:
        try:
            link.require_session()
        except BoardReset:
            return True
        return False

    @staticmethod
    def _refusal(code: int, exc: BoardRefused) -> MeasureError:
        if code == ErrorCode.FAULT:
            return MeasureError(Outcome.CRASH, f"the kernel faulted (exception {exc.error.detail}); the board reset itself")
        if code in (ErrorCode.BAD_IO, ErrorCode.KERNEL_FAILED):
            return MeasureError(Outcome.RUNTIME_ERROR, f"the harness rejected the run: {exc.error.describe()}")
        return MeasureError(Outcome.RUNTIME_ERROR, str(exc))

    def _check_hello(self, hello: Hello, build: BuildResult, block_bytes: int, url: str) -> None:
        expected = build.info.get("image_id")
        if hello.board != self.target.name or (expected and f"{hello.image_id:#010x}" != expected):
            raise MeasureError(Outcome.RUNTIME_ERROR,
                               f"the board at {url} runs image {hello.image_id:#010x} of {hello.board!r}, not "
                               f"{expected} of {self.target.name!r}: did the flash step fail?")
        if block_bytes > hello.io_capacity:
            raise MeasureError(Outcome.TOO_LARGE, f"I/O area of {block_bytes} bytes needed; the board holds {hello.io_capacity}")

    def _values(self, cycles: Cycles) -> dict:
        """The kernel's cycles: the minimum over the runs of (region - empty region) for each
        counter that counted every run. `cycles` is the DWT's figure when the DWT counted,
        else SysTick's; `dwt_cycles` / `systick_cycles` are present only for a counter that
        counted, so a record always says where its number came from. No counter, no number."""
        values = {}
        if self.target.serial.counter == "dwt" and cycles.overhead.dwt_valid and all(c.dwt_valid for c in cycles.runs):
            values["dwt_cycles"] = max(0, min(c.dwt - cycles.overhead.dwt for c in cycles.runs))
        if cycles.overhead.systick_valid and all(c.systick_valid for c in cycles.runs):
            values["systick_cycles"] = max(0, min(c.systick - cycles.overhead.systick for c in cycles.runs))
        if not values:
            raise MeasureError(Outcome.RUNTIME_ERROR, "no counter measured the kernel: the DWT cycle counter is "
                               "absent or read 0, and SysTick wrapped (the kernel takes over 2^24 cycles)")
        values["cycles"] = values.get("dwt_cycles", values.get("systick_cycles"))
        return values

    # --- the board's life cycle ---------------------------------------------------------------
    def _start_board(self, build: BuildResult) -> "_Board":
        link = self.target.serial
        if link.flash_keeps_running:
            return self._launch(build)
        run_tool(substitute(link.flash, build.path, None), cwd=build.workdir, outcome=Outcome.RUNTIME_ERROR,
                 timeout=link.flash_timeout_s)
        port = self._open_device(link.port)
        return _Board(link.port, BoardLink(port, link.port, link.reply_timeout_s, link.retries,
                                           session=_session_token(build)), process=None)

    def _launch_args(self, build: BuildResult, port: int) -> list[str]:
        return substitute(self.target.serial.flash, build.path, port)

    def _launch(self, build: BuildResult) -> "_Board":
        """Start the emulated board (the flash command that keeps running) and connect to it."""
        link = self.target.serial
        problems = []
        for _ in range(3):  # another program may grab the free port between our check and QEMU's bind
            with self._ports_lock:
                port = free_loopback_port(self._ports)
                self._ports.add(port)
            url = link.port.replace("{port}", str(port))
            log = open(build.workdir / "board.log", "wb")
            try:
                process = subprocess.Popen(self._launch_args(build, port), cwd=build.workdir, stdin=subprocess.DEVNULL,
                                           stdout=log, stderr=subprocess.STDOUT)
            except FileNotFoundError:
                log.close()
                self._release(port)
                raise ToolMissing(f"{link.flash[0]}: not found on PATH (the board's [serial].flash command)") from None
            board = _Board(url, None, process, log, release=lambda port=port: self._release(port))
            deadline = time.monotonic() + link.flash_timeout_s
            while time.monotonic() < deadline and process.poll() is None:
                try:
                    port_object = open_port(url, link.baudrate, link.reply_timeout_s)
                except (serial.SerialException, OSError):
                    time.sleep(CONNECT_POLL_S)
                    continue
                board.link = BoardLink(port_object, url, link.reply_timeout_s, link.retries,
                                       session=_session_token(build))
                return board
            exited = process.poll()
            board.stop()
            tail = (build.workdir / "board.log").read_text(errors="replace").strip()[-300:]
            problems.append(f"{link.flash[0]} exited with status {exited}: {tail}" if exited is not None
                            else f"nothing listened on {url} within {link.flash_timeout_s:.0f} s")
        raise MeasureError(Outcome.RUNTIME_ERROR, "the board did not start: " + "; ".join(problems))

    def _release(self, port: int) -> None:
        with self._ports_lock:
            self._ports.discard(port)

    def _open_device(self, url: str):
        """A real board's port, which may take a moment to come back after flashing."""
        link = self.target.serial
        deadline = time.monotonic() + link.flash_timeout_s
        while True:
            try:
                return open_port(url, link.baudrate, link.reply_timeout_s)
            except (serial.SerialException, OSError, ValueError) as exc:
                if time.monotonic() >= deadline:
                    raise port_problem(url, exc) from None
                time.sleep(0.2)


class _Board:
    """A connected board: its link, and the process that is the board when it is emulated."""

    def __init__(self, url: str, link: BoardLink | None, process: subprocess.Popen | None, log=None,
                 release=None):
        self.url, self.link, self.process, self.log, self.release = url, link, process, log, release

    def lost(self) -> Outcome:
        """After its link closed: was the board an emulator killed from outside, or did the
        device go away (a real board unplugged, an emulator or proxy that just exited)?"""
        if self.process is not None:
            try:
                self.process.wait(timeout=LOST_GRACE_S)  # the port closes a moment before the exit
            except subprocess.TimeoutExpired:
                pass
            if killed_from_outside(self.process.returncode):
                return Outcome.EMULATOR_LOST
        return Outcome.DEVICE_LOST

    def stop(self) -> None:
        if self.link is not None:
            try:
                self.link.port.close()
            except (serial.SerialException, OSError):
                pass
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.log is not None:
            self.log.close()
        if self.release is not None:
            self.release()
            self.release = None


def _image_id(objects: list[Path], glue_text: str) -> int:
    """A 32-bit identity of this variant's image, so the host knows the board runs it."""
    digest = hashlib.sha256(glue_text.encode())
    for obj in objects:
        digest.update(Path(obj).read_bytes())
    return int.from_bytes(digest.digest()[:4], "little")


def _session_token(build: BuildResult) -> int:
    """Any nonzero value works (a reset board reports 0); the image id is at hand."""
    return int(build.info.get("image_id", "0x1"), 16) | 1
