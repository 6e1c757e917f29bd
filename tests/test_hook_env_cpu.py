"""kernels/conv_pool_env.h, the tuning hooks' reads of the environment: inside a HookScope
(held by the binding's entry points for one call of the op) the environment is walked once and,
where no CONV_POOL_ variable is set, every hook reads as unset without a walk; where one is set,
or outside a scope, each read is std::getenv's answer of that moment. A small C++ program built
with the host compiler checks it; a scan of kernels/ checks that every hook reads through it.
"""
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

PROGRAM = r"""
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include "conv_pool_env.h"

using conv_pool_env::HookScope;
using conv_pool_env::hook_env;

static int failures = 0;
static void expect(bool ok, const char* what) {
  if (!ok) { std::printf("FAIL %s\n", what); ++failures; }
}
static bool is(const char* value, const char* want) {
  return want == nullptr ? value == nullptr : value != nullptr && std::strcmp(value, want) == 0;
}

int main() {
  unsetenv("CONV_POOL_TEST_HOOK");
  expect(!conv_pool_env::any_hook_set(), "no CONV_POOL_ variable at the start");
  {
    HookScope outer;
    // Set during the scope: the scope found none set, so it still reads as unset (the
    // environment is not to change within one call of the op).
    setenv("CONV_POOL_TEST_HOOK", "during", 1);
    expect(is(hook_env("CONV_POOL_TEST_HOOK"), nullptr), "none set at the scope's start");
    {
      HookScope inner;  // nested: no second walk, the outer answer holds
      expect(is(hook_env("CONV_POOL_TEST_HOOK"), nullptr), "nested scope");
    }
    expect(is(hook_env("CONV_POOL_TEST_HOOK"), nullptr), "after the nested scope");
  }
  // Outside a scope: getenv's answer of the moment.
  expect(is(hook_env("CONV_POOL_TEST_HOOK"), "during"), "outside, set");
  setenv("CONV_POOL_TEST_HOOK", "before", 1);
  {
    HookScope scope;  // one set: reads as getenv does
    expect(conv_pool_env::any_hook_set(), "a CONV_POOL_ variable is set");
    expect(is(hook_env("CONV_POOL_TEST_HOOK"), "before"), "set at the scope's start");
    expect(is(hook_env("CONV_POOL_OTHER_HOOK"), nullptr), "another, unset");
    setenv("CONV_POOL_TEST_HOOK", "changed", 1);
    expect(is(hook_env("CONV_POOL_TEST_HOOK"), "changed"), "getenv's answer inside");
  }
  unsetenv("CONV_POOL_TEST_HOOK");
  // A variable whose name only contains the prefix, or whose value does, is not a hook.
  setenv("MY_CONV_POOL_X", "1", 1);
  setenv("OTHER", "CONV_POOL_Y=1", 1);
  expect(!conv_pool_env::any_hook_set(), "the prefix elsewhere");
  {
    HookScope scope;
    setenv("CONV_POOL_TEST_HOOK", "late", 1);
    expect(is(hook_env("CONV_POOL_TEST_HOOK"), nullptr), "unset at the scope's start");
  }
  expect(is(hook_env("CONV_POOL_TEST_HOOK"), "late"), "after the scope");
  std::printf(failures == 0 ? "ok\n" : "failed\n");
  return failures == 0 ? 0 : 1;
}
"""


def test_hook_scope_walks_the_environment_once_and_reads_as_getenv_otherwise(tmp_path):
    compiler = shutil.which("g++") or shutil.which("c++")
    assert compiler, "a C++ compiler (g++) is needed, as for the extension's build"
    source = tmp_path / "hook_env.cpp"
    source.write_text(PROGRAM)
    binary = tmp_path / "hook_env"
    subprocess.run([compiler, "-std=c++17", "-O1", "-Wall", "-Werror", f"-I{REPO / 'kernels'}",
                    str(source), "-o", str(binary)], check=True, capture_output=True, text=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONV_POOL_")}
    result = subprocess.run([str(binary)], capture_output=True, text=True, env=env)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stdout


SOURCES = sorted(p.relative_to(REPO) for p in (REPO / "kernels").rglob("*")
                 if p.suffix in (".h", ".cuh", ".cu", ".cpp")
                 and p.name != "conv_pool_env.h")  # (hook_env itself)


def test_the_scan_sees_the_hooks_files():
    names = {p.name for p in SOURCES}
    assert {"general_hooks.h", "conv_relu_maxpool_registry.cu", "general_trace.cuh"} <= names


@pytest.mark.parametrize("path", SOURCES)
def test_hooks_read_the_environment_through_hook_env(path):
    """Every CONV_POOL_ hook of kernels/ reads through conv_pool_env::hook_env: a direct
    std::getenv would walk the environment on every call, scope or not."""
    text = (REPO / path).read_text()
    assert not re.search(r"\bgetenv\s*\(", text), f"{path} calls getenv directly"
