"""fdahpc.heap.keep_freed_memory: freed blocks stay in the process (no fresh page faults for
the next allocation of the same sizes), and a user's own malloc settings win."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys

import pytest

from fdahpc import heap

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Tensors of 0.5-16 MB allocated and freed in turn, as a step's activations are: after two
# warm-up passes (the heap grows to its size), the faults of five more.
CHURN = r"""
import json, resource, sys, torch
from fdahpc.heap import keep_freed_memory, release_freed_models
kept = keep_freed_memory()
if "release" in sys.argv:  # then what a semi-asynchronous rank sets: blocks >= 1 MB mapped afresh
    assert release_freed_models()
sizes = [2**k for k in range(17, 23)]
def churn():
    for n in sizes:
        t = torch.ones(n + 7)
        del t
churn()
churn()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(5):
    churn()
print(json.dumps(dict(kept=kept, faults=resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)))
"""


def churn(env: dict[str, str], *args: str) -> dict:
    out = subprocess.run([sys.executable, "-c", CHURN, *args], cwd=ROOT, env=env, check=True, capture_output=True, text=True,
                         timeout=120)
    return json.loads(out.stdout.strip().splitlines()[-1])


def clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in heap._USER_SETTINGS}
    env["GLIBC_TUNABLES"] = ""
    return env


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt's thresholds are glibc's")
def test_freed_blocks_are_reused_without_new_page_faults():
    got = churn(clean_env())
    assert got["kept"] is True
    # 5 passes over 32 MB of tensors: 40,000 pages if each were faulted in again. Kept, at most
    # the largest tensor's 4,096 once more (where the heap's layout makes it grow once more)
    assert got["faults"] <= 4_096 + 100, got
    # what the measure tells apart: a user's fixed 128 KiB mmap threshold (glibc's initial one)
    # maps every one of these tensors afresh (and keep_freed_memory leaves the user's setting)
    mapped = churn(dict(clean_env(), MALLOC_MMAP_THRESHOLD_="131072"))
    assert mapped["kept"] is False and mapped["faults"] > 30_000, mapped


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt's thresholds are glibc's")
def test_semi_async_ranks_give_blocks_from_1_mb_back_at_once():
    """release_freed_models after keep_freed_memory (a semi-async rank): the tensors of 1 MB
    and more (5 of the 6 sizes, 31 MB a pass) are mapped and unmapped each time."""
    got = churn(clean_env(), "release")
    assert got["kept"] is True and got["faults"] > 5 * 7_000, got


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt's thresholds are glibc's")
def test_a_users_own_malloc_settings_win():
    for name, value in (("MALLOC_TRIM_THRESHOLD_", "131072"), ("GLIBC_TUNABLES", "glibc.malloc.trim_threshold=131072")):
        got = churn(dict(clean_env(), **{name: value}))
        assert got["kept"] is False, name
