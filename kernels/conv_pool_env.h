// The tuning hooks' environment variables (CONV_POOL_*: general_hooks.h, the registry's), read
// through hook_env(name). Outside a HookScope that is std::getenv, a walk of the whole environment
// each time: a forward on the general kernel reads ~50 hooks, each 40-100 ns on a development CPU
// with 35-155 variables set. Inside a HookScope (the binding's entry points hold one for the call)
// the environment is walked once, at the outermost scope's start, and where no CONV_POOL_ variable
// is set (every user's case) hook_env answers nullptr without a walk; where one is, it reads as
// outside. The environment is not expected to change during one call of the op. Host code only;
// thread_local state.
#pragma once

#include <cstdlib>
#include <cstring>

extern "C" char** environ;

namespace conv_pool_env {

constexpr char kPrefix[] = "CONV_POOL_";

// Whether any variable of the environment starts with kPrefix.
inline bool any_hook_set() {
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry)
    if (std::strncmp(*entry, kPrefix, sizeof kPrefix - 1) == 0) return true;
  return false;
}

struct ScopeState {
  int depth = 0;
  bool none_set = false;
};
inline thread_local ScopeState scope_state;

class HookScope {
 public:
  HookScope() {
    if (scope_state.depth++ == 0) scope_state.none_set = !any_hook_set();
  }
  ~HookScope() {
    if (--scope_state.depth == 0) scope_state.none_set = false;
  }
  HookScope(const HookScope&) = delete;
  HookScope& operator=(const HookScope&) = delete;
};

// $name (a CONV_POOL_ variable), or nullptr where it is not set.
inline const char* hook_env(const char* name) {
  return scope_state.none_set ? nullptr : std::getenv(name);
}

}  // namespace conv_pool_env
