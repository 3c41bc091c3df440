"""The package reads bottom-up: options → config → checkpoint → run (the mode interfaces and
the skeleton) → the modes → the command line. Each module imports the layers below it at
module level; nothing imports a layer above it, and a package-internal import inside a
function is one of the few kept lazy for start-up cost (Numba, a communicator backend),
each named here with its reason."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parent.parent / "fdahpc"

MODULES = {}  # filled below: name → path


#: The layers, bottom first; a module may import its own layer and the ones below. The
#: modes' layer holds what only a mode builds: the strategies and the semi-async parts.
def _layers():
    parts = {m for m in MODULES if m.startswith(("fdahpc.strategies", "fdahpc.semiasync"))} | {"fdahpc.averager"}
    return [
        {"fdahpc.theta", "fdahpc.options", "fdahpc.renamed"},
        {"fdahpc.config"},
        {"fdahpc.checkpoint"},
        {"fdahpc.run"},
        {"fdahpc.sync_loop"} | parts,
        {"fdahpc.cli", "fdahpc.train"},
    ]

#: Package-internal imports kept inside a function, and why.
LAZY = {
    ("fdahpc.strategies.base", "fdahpc.sketch"): "Numba: only a sketched run compiles it",
    ("fdahpc.strategies.fda", "fdahpc.sketch"): "Numba: only a sketched run compiles it",
    ("fdahpc.strategies.fedadp", "fdahpc.sketch"): "Numba: only a sketched run compiles it",
    ("fdahpc.sync_loop", "fdahpc.sketch"): "Numba: only a sketched run compiles it",
    ("fdahpc.semiasync.client", "fdahpc.sketch"): "Numba: only --fedqs-sketch-similarity needs it",
    ("fdahpc.semiasync.exact", "fdahpc.semiasync.exact_kernel"): "Numba: only large models take the kernel",
    ("fdahpc.comm", "fdahpc.comm.mpi"): "mpi4py: only an MPI run initializes MPI",
    ("fdahpc.comm", "fdahpc.comm.torch_dist"): "torch.distributed: only a torch backend run",
    ("fdahpc.data.readers", "fdahpc.data.shakespeare"): "the text readers import torch, the image readers do not",
    ("fdahpc.data.readers", "fdahpc.data.text"): "the text readers import torch, the image readers do not",
}


def _name(path: Path) -> str:
    parts = path.relative_to(PKG.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path):
    """(imported module, at module level?) for each package-internal import of ``path``."""
    name = _name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text())
    top = {id(node) for node in tree.body}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            targets = [module] if node.module else [f"{module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        else:
            continue
        for target in targets:
            if target == "fdahpc" or target.startswith("fdahpc."):
                yield target, id(node) in top


MODULES.update({_name(p): p for p in sorted(PKG.rglob("*.py"))})
LAYERS = _layers()


def _layer(module: str) -> int | None:
    return next((i for i, layer in enumerate(LAYERS) if module in layer), None)


@pytest.mark.parametrize("module", sorted(m for layer in LAYERS for m in layer))
def test_a_layer_imports_no_layer_above_it(module):
    mine = _layer(module)
    above = {m for i, layer in enumerate(LAYERS) if i > mine for m in layer}
    seen = set()

    def reach(name):  # everything the module's imports pull in, transitively, at module level
        for target, at_top in _imports(MODULES[name]):
            target = target if target in MODULES else target.rpartition(".")[0]
            if at_top and target in MODULES and target not in seen:
                seen.add(target)
                reach(target)

    reach(module)
    assert not seen & above, f"{module} imports {sorted(seen & above)}, a layer above it"


def test_imports_inside_functions_are_only_the_lazy_ones():
    lazy = sorted((name, target.rpartition(".")[0] if target not in MODULES else target)
                  for name, path in MODULES.items() for target, at_top in _imports(path) if not at_top)
    assert [pair for pair in lazy if pair not in LAZY] == []
    assert set(LAZY) <= set(lazy), "a lazy import listed here is gone: drop it from LAZY"


def test_the_configuration_imports_nothing_heavy():
    probe = ("import fdahpc.config, sys; print(sorted(m for m in sys.modules if m.startswith('fdahpc') "
             "or m in ('torch', 'numpy', 'mpi4py')))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    # choices (a refusal's wording) and lr_schedule (the rate's formula): pure Python like the others
    assert eval(out) == ["fdahpc", "fdahpc.choices", "fdahpc.config", "fdahpc.lr_schedule", "fdahpc.options",
                         "fdahpc.renamed", "fdahpc.theta"], out
