// A thread's most recent plans of the general kernel, so that planning one shape again costs a
// lookup instead of the tile search: a forward plans its shape up to five times (whether the
// kernel runs it, then the workspace and the launch, each with and without the copy term), and
// a network calls the same layers call after call. The key holds every input of the search,
// the hooks it reads among them (general_hooks.h: set or cleared between calls, they change
// the key, never a stale answer). Host code only; thread_local, so no locking.
#pragma once

#include <cstring>

#include "../conv_relu_maxpool.h"
#include "general_hooks.h"

namespace general_wgmma {

// The search's inputs, compared byte for byte (zero-filled first: padding and all).
struct PlanKey {
  ConvPoolShape shape;
  ConvPoolDevice device;
  int flags;  // the search's own flags (split, allow_tma, x_in_place, copy_term)
  hooks::SearchHooks search_hooks;

  static PlanKey of(const ConvPoolShape& s, const ConvPoolDevice& device, int flags) {
    PlanKey key;
    std::memset(&key, 0, sizeof key);
    std::memcpy(&key.shape, &s, sizeof s);
    std::memcpy(&key.device, &device, sizeof device);
    key.flags = flags;
    key.search_hooks = hooks::SearchHooks::read();
    return key;
  }
  bool operator==(const PlanKey& other) const {
    return std::memcmp(this, &other, sizeof *this) == 0;
  }
};

// kEntries (key, value) pairs, the oldest replaced first. find_or(key, search): the value
// stored for key, or search()'s, stored.
template <class Value, int kEntries = 16>
class PlanCache {
 public:
  template <class Search>
  Value find_or(const PlanKey& key, Search search) {
    for (int i = 0; i < used_; ++i)
      if (keys_[i] == key) return values_[i];
    const int slot = next_;
    next_ = (next_ + 1) % kEntries;
    used_ = used_ < kEntries ? used_ + 1 : used_;
    keys_[slot] = key;
    values_[slot] = search();
    return values_[slot];
  }

 private:
  PlanKey keys_[kEntries];
  Value values_[kEntries];
  int used_ = 0, next_ = 0;
};

// search()'s answer for (s, device, flags), from this thread's cache where it holds the key
// (with $CONV_POOL_GENERAL_PLAN_CACHE=0, searched afresh).
template <class Value, class Search>
Value cached_plan(const ConvPoolShape& s, const ConvPoolDevice& device, int flags,
                  Search search) {
  if (!hooks::plan_cache_allowed()) return search();
  thread_local PlanCache<Value> cache;
  return cache.find_or(PlanKey::of(s, device, flags), search);
}

}  // namespace general_wgmma
