"""Just enough ELF reading for edgetune: function addresses and code size.

Reads 32- and 64-bit little-endian ELF files (Arm, AArch64, x86-64) without binutils, so
the same code serves every target.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

SHF_EXECINSTR = 0x4
SHF_ALLOC = 0x2
SHT_SYMTAB = 2
SHT_NOBITS = 8


class ElfError(ValueError):
    pass


@dataclass(frozen=True)
class Section:
    name: str
    type: int
    flags: int
    addr: int
    offset: int
    size: int
    link: int
    entsize: int


def _sections(data: bytes) -> tuple[list[Section], bool]:
    if data[:4] != b"\x7fELF":
        raise ElfError("not an ELF file")
    is64 = data[4] == 2
    if data[5] != 1:
        raise ElfError("big-endian ELF is not supported")
    if is64:
        shoff, = struct.unpack_from("<Q", data, 0x28)
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
        fmt = "<IIQQQQIIQQ"
    else:
        shoff, = struct.unpack_from("<I", data, 0x20)
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x2E)
        fmt = "<IIIIIIIIII"
    raw = []
    for i in range(shnum):
        name, typ, flags, addr, offset, size, link, _info, _align, entsize = struct.unpack_from(fmt, data, shoff + i * shentsize)
        raw.append((name, typ, flags, addr, offset, size, link, entsize))
    strtab = raw[shstrndx]
    names = data[strtab[4]:strtab[4] + strtab[5]]

    def cstr(table: bytes, index: int) -> str:
        return table[index:table.index(b"\0", index)].decode("ascii", "replace")

    return [Section(cstr(names, r[0]), *r[1:]) for r in raw], is64


def _symbol_entries(path: Path):
    """(name, value, binding, section index) of every named symbol."""
    data = Path(path).read_bytes()
    sections, is64 = _sections(data)
    for sec in sections:
        if sec.type != SHT_SYMTAB:
            continue
        strsec = sections[sec.link]
        strings = data[strsec.offset:strsec.offset + strsec.size]
        fmt, size = ("<IBBHQQ", 24) if is64 else ("<IIIBBH", 16)
        for off in range(sec.offset, sec.offset + sec.size, size):
            fields = struct.unpack_from(fmt, data, off)
            if is64:
                name, info, _other, shndx, value, _sz = fields
            else:
                name, value, _sz, info, _other, shndx = fields
            if name:
                yield strings[name:strings.index(b"\0", name)].decode("ascii", "replace"), value, info >> 4, shndx


def symbols(path: Path) -> dict[str, int]:
    """Symbol name -> value, for defined symbols. Thumb's low address bit is kept."""
    return {name: value for name, value, _, shndx in _symbol_entries(path) if shndx != 0}


STB_GLOBAL = 1


def global_definitions(path: Path) -> set[str]:
    """Names an object defines for other objects (strong global symbols: two objects
    defining the same one cannot be linked together)."""
    return {name for name, _, binding, shndx in _symbol_entries(path) if shndx != 0 and binding == STB_GLOBAL}


def code_bytes(path: Path) -> int:
    """Bytes of executable code in an object file or image (all SHF_EXECINSTR sections)."""
    sections, _ = _sections(Path(path).read_bytes())
    return sum(s.size for s in sections if s.flags & SHF_EXECINSTR and s.flags & SHF_ALLOC)


def alloc_bytes(path: Path) -> int:
    """Bytes an object occupies in memory once linked (code, read-only and writable data)."""
    sections, _ = _sections(Path(path).read_bytes())
    return sum(s.size for s in sections if s.flags & SHF_ALLOC)


def bytes_in(path: Path, prefixes: tuple[str, ...]) -> int:
    """Bytes of the allocated sections whose names start with one of `prefixes`."""
    sections, _ = _sections(Path(path).read_bytes())
    return sum(s.size for s in sections if s.flags & SHF_ALLOC and s.name.startswith(prefixes)) if prefixes else 0


SHF_WRITE = 0x1
EM_AARCH64 = 0xB7


def ram_bytes(path: Path) -> int:
    """Bytes of writable memory an object keeps for itself (.data and .bss)."""
    sections, _ = _sections(Path(path).read_bytes())
    return sum(s.size for s in sections if s.flags & SHF_ALLOC and s.flags & SHF_WRITE)


def is_aarch64(path: Path) -> bool:
    data = Path(path).read_bytes()[:20]
    if data[:4] != b"\x7fELF":
        raise ElfError("not an ELF file")
    return struct.unpack_from("<H", data, 0x12)[0] == EM_AARCH64
