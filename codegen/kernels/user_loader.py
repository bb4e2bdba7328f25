"""Finding kernels of the user's own: a folder or a Python file (`--kernel-file PATH`),
or installed packages' `edgetune.kernels` entry points (importlib.metadata). Each becomes a
UserKernel with the sha256 of its definition's files, which an export's manifest records.

A folder holds `kernel.py`, which defines `KERNEL = edgetune.KernelDef(...)`, and its
sources; a Python file defines `KERNEL` and names sources beside it. Loading runs that
Python (it is the user's own code, as Kernel Tuner scripts are): only ever a file the user
names on the command line or installs, never a path read from a manifest or a database.
"""
from __future__ import annotations

import atexit
import hashlib
import importlib.metadata
import importlib.util
import os
import shutil
import stat
import sys
import tempfile
import traceback
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from .base import KernelError
from .user import KernelDef, UserKernel

DEFINITION_FILE = "kernel.py"
ENTRY_POINT_GROUP = "edgetune.kernels"
SKIPPED_PARTS = ("__pycache__",)


def definition_files(folder: Path, spec: KernelDef, module_file: Path | None, whole_folder: bool) -> list[Path]:
    """The files a kernel's definition consists of: its folder's (without caches and hidden
    files), or its Python file and the sources it names."""
    if whole_folder:
        return sorted(p for p in folder.rglob("*") if p.is_file() and not p.name.endswith(".pyc")
                      and not any(part.startswith(".") or part in SKIPPED_PARTS for part in p.relative_to(folder).parts))
    named = [spec.source if not spec.source_text else "", *(v.source for v in spec.vectors)]  # text: not a file
    return sorted({*([module_file] if module_file else []), *(folder / n for n in named if n)})


def read_files(folder: Path, files: list[Path]) -> tuple[tuple[str, bytes], ...]:
    """Each file's name relative to the folder (POSIX) and its content."""
    contents = []
    for path in files:
        try:
            if not stat.S_ISREG(path.stat().st_mode):  # a pipe or a device would block the read for ever
                raise KernelError(f"{path}: not a regular file (a folder, pipe or device), not a kernel source")
            data = path.read_bytes()
        except OSError as exc:
            raise KernelError(f"{path}: cannot read ({exc.strerror})") from None
        contents.append((path.relative_to(folder).as_posix(), data))
    return tuple(contents)


def digest_of_contents(contents, extra: bytes = b"") -> str:
    """sha256 over each file's relative name and content (read_files)."""
    h = hashlib.sha256(extra)
    for name, data in contents:
        h.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
    return h.hexdigest()


def digest_of(folder: Path, files: list[Path], extra: bytes = b"") -> str:
    """sha256 over each file's name (relative to the folder) and content."""
    return digest_of_contents(read_files(folder, files), extra)


@dataclass(frozen=True)
class KernelBundle:
    """A kernel's definition by content, to load it where its files are not (a cluster's
    worker): the files its definition digest covers, their digest, and which file to load
    (a folder's kernel.py, or the .py file)."""

    name: str
    definition: str
    entry: str
    whole_folder: bool
    files: tuple[tuple[str, bytes], ...]


def kernel_from_def(spec: object, where: str, folder: Path, module_file: Path | None = None,
                    whole_folder: bool = False, extra: bytes = b"", shippable: bool = False) -> UserKernel:
    """The UserKernel of a definition; `shippable`: keep its files as a KernelBundle (a
    kernel loaded from a folder or .py file, which a cluster's workers get by content)."""
    if not isinstance(spec, KernelDef):
        raise KernelError(f"{where}: KERNEL is {type(spec).__name__}, not an edgetune.KernelDef")
    folder = Path(spec.base).resolve() if spec.base is not None else folder
    files = definition_files(folder, spec, module_file, whole_folder)
    # Names relative to the folder; with a `base` elsewhere, to the folder both lie in.
    root = folder if all(p.is_relative_to(folder) for p in files) else Path(os.path.commonpath([folder, *files]))
    contents = read_files(root, files)
    kernel = UserKernel(spec, folder, digest_of_contents(contents, extra))
    kernel.check_templates()
    # Shippable by content (to a cluster's workers): a kernel of files, loaded from its own folder.
    shippable = shippable and module_file is not None and not extra and spec.base is None and root == module_file.parent
    kernel.bundle = KernelBundle(kernel.name, kernel.definition, module_file.name, whole_folder,
                                 contents) if shippable else None
    return kernel


def load_kernel_file(path: str | Path) -> UserKernel:
    """The kernel a folder (with kernel.py) or a Python file defines."""
    path = Path(path)
    if path.is_dir():
        module_file, whole = path / DEFINITION_FILE, True
        if not module_file.is_file():
            raise KernelError(f"{path}: a kernel folder holds {DEFINITION_FILE} (defining KERNEL = edgetune.KernelDef(...))")
    elif path.is_file() and path.suffix == ".py":
        module_file, whole = path, False
    else:
        raise KernelError(f"{path}: not a kernel folder or a .py file")
    module_file = module_file.resolve()
    spec = _run_definition(module_file)
    return kernel_from_def(spec, str(module_file), module_file.parent, module_file, whole, shippable=True)


_BUNDLED: dict[str, UserKernel] = {}  # definition digest -> kernel, loaded once per process


def kernel_of_bundle(bundle: KernelBundle) -> UserKernel:
    """The kernel a bundle holds, written to a private temporary folder of this process and
    loaded from there; refused when its files do not hash to the bundle's definition."""
    sent = digest_of_contents(bundle.files)
    if sent != bundle.definition:
        raise KernelError(f"kernel {bundle.name}: the definition shipped to this worker hashes to {sent[:12]}, "
                          f"not {bundle.definition[:12]} as sent; refused")
    known = _BUNDLED.get(bundle.definition)
    if known is not None:
        return known
    root = Path(tempfile.mkdtemp(prefix="edgetune-kernel-"))  # mode 0700: this user's only
    atexit.register(shutil.rmtree, root, True)  # gone with the worker process
    for name, data in bundle.files:
        parts = PurePosixPath(name).parts
        if not parts or PurePosixPath(name).is_absolute() or any(p in ("", ".", "..") for p in parts):
            raise KernelError(f"kernel {bundle.name}: shipped file name {name!r} is not a path inside its folder")
        path = root.joinpath(*parts)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    kernel = load_kernel_file(root if bundle.whole_folder else root / bundle.entry)
    if kernel.definition != bundle.definition or kernel.name != bundle.name:
        raise KernelError(f"kernel {bundle.name}: the definition shipped to this worker hashes to "
                          f"{kernel.definition[:12]} ({kernel.name}), not {bundle.definition[:12]} as sent; refused")
    _BUNDLED[bundle.definition] = kernel
    return kernel


def _run_definition(module_file: Path) -> object:
    name = "edgetune_user_kernel_" + hashlib.sha256(str(module_file).encode()).hexdigest()[:12]
    loader_spec = importlib.util.spec_from_file_location(name, module_file)
    module = importlib.util.module_from_spec(loader_spec)
    sys.modules[name] = module  # dataclasses and pickling look the module up by name
    sys.path.insert(0, str(module_file.parent))  # its own helper modules, beside it, import as usual
    try:
        # Compiled from the source every time, not through the import system's bytecode
        # cache: a .pyc is trusted by the source's size and mtime in whole seconds, so a
        # kernel.py edited within the second to one of the same size (SHIFT 2 -> 1) ran the
        # old definition; and a user's folder gets no __pycache__ of ours.
        code = compile(module_file.read_bytes(), str(module_file), "exec", dont_inherit=True)
        exec(code, module.__dict__)  # noqa: S102 - the user's own kernel definition, as an import would
    except KernelError:
        raise
    except Exception as exc:  # noqa: BLE001 - the user's code: one line naming file and line
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if Path(f.filename) == module_file]
        line = f":{frames[-1].lineno}" if frames else (f":{exc.lineno}" if isinstance(exc, SyntaxError) else "")
        raise KernelError(f"{module_file}{line}: {type(exc).__name__}: {exc}") from None
    finally:
        sys.path.remove(str(module_file.parent))
    if not hasattr(module, "KERNEL"):
        raise KernelError(f"{module_file}: defines no KERNEL (KERNEL = edgetune.KernelDef(...))")
    return module.KERNEL


def installed_kernels() -> tuple[list[UserKernel], list[str]]:
    """The kernels installed packages declare in the `edgetune.kernels` entry-point group
    (each naming a KernelDef, or a module defining KERNEL), and a line for each that
    cannot be loaded."""
    kernels, problems = [], []
    for ep in sorted(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        where = f"entry point {ep.name} = {ep.value}"
        try:
            target = ep.load()
            spec = getattr(target, "KERNEL", target)
            module = sys.modules.get(ep.module)
            module_file = Path(module.__file__).resolve() if module and getattr(module, "__file__", None) else None
            if module_file is None:
                raise KernelError("its module has no file")
            kernels.append(kernel_from_def(spec, where, module_file.parent, module_file))
        except KernelError as exc:
            problems.append(f"{where}: {exc}")
        except Exception as exc:  # noqa: BLE001 - a broken installed package: named, not fatal
            problems.append(f"{where}: {type(exc).__name__}: {exc}")
    return kernels, problems
