#include "live_twin_hooks.h"

#include <unistd.h>

#include <bpf/btf.h>
#include <fmt/format.h>

#include "hangtrace/text.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace hangtrace {
namespace {

const std::string kHotStandby =
    "standby: sampled steady state (attached while a job looks stuck; --steady-state exact keeps it on)";

// HANGTRACE_LIVE_NO_TP_BTF=1 makes these concerns take their raw_tp twins,
// as on a kernel without tp_btf; the tests run both paths with it.
bool no_tp_btf() {
  const char* v = getenv("HANGTRACE_LIVE_NO_TP_BTF");
  return v && *v && std::strcmp(v, "0") != 0;
}

// tp_btf/<tp> needs the btf_trace_<tp> typedef the tracepoint macros emit
// into vmlinux BTF.
std::vector<bool> btf_tracepoints(const std::vector<TwinSpec>& specs) {
  std::vector<bool> out(specs.size(), false);
  btf* vmlinux = btf__load_vmlinux_btf();
  if (!vmlinux) return out;
  for (size_t i = 0; i < specs.size(); ++i) {
    if (specs[i].raw_only) continue;
    std::string type = "btf_trace_" + specs[i].tp;
    out[i] = btf__find_by_name_kind(vmlinux, type.c_str(), BTF_KIND_TYPEDEF) > 0;
  }
  btf__free(vmlinux);
  return out;
}

bpf_program* find_program(bpf_object* obj, const std::string& name) {
  return bpf_object__find_program_by_name(obj, name.c_str());
}

}  // namespace

TwinHooks::TwinHooks(std::string concern, std::vector<TwinSpec> specs, bool obeys_no_tp_btf)
    : concern_(std::move(concern)), obeys_no_tp_btf_(obeys_no_tp_btf) {
  for (auto& s : specs) hooks_spec_.push_back(Hook{std::move(s)});
}

Result<bool> TwinHooks::load(const std::function<Result<bpf_object*>()>& open,
                             const std::function<int()>& load, const std::function<void()>& destroy) {
  const bool switched_off = obeys_no_tp_btf_ && no_tp_btf();
  std::vector<TwinSpec> specs;
  for (const Hook& h : hooks_spec_) specs.push_back(h.spec);
  std::vector<bool> btf = switched_off ? std::vector<bool>(specs.size(), false) : btf_tracepoints(specs);
  bool any_btf = false;
  for (size_t i = 0; i < hooks_spec_.size(); ++i) {
    Hook& h = hooks_spec_[i];
    h.btf_available = btf[i] && h.spec.btf_unusable_because.empty();
    if (h.spec.raw_only || h.btf_available) {
      h.why_not_btf.clear();
    } else if (switched_off) {
      h.why_not_btf = "tp_btf disabled by HANGTRACE_LIVE_NO_TP_BTF";
    } else if (!h.spec.btf_unusable_because.empty()) {
      h.why_not_btf = h.spec.btf_unusable_because;
    } else {
      h.why_not_btf = "tp_btf unavailable: no btf_trace_" + specs[i].tp + " in vmlinux BTF";
    }
    any_btf = any_btf || h.btf_available;
  }

  struct Try {
    bool btf;
    bool optional;
    const char* what;
  };
  std::vector<Try> tries;
  if (any_btf) tries.push_back({true, true, "tp_btf"});
  tries.push_back({false, true, "raw_tp"});
  tries.push_back({false, false, "raw_tp, required hooks only"});

  std::string first_error, last_error;
  for (const Try& t : tries) {
    auto opened = open();
    if (!opened) return make_error(fmt::format("failed to load BPF {} tracer: {}", concern_, opened.error()));
    bpf_object* obj = *opened;
    for (Hook& h : hooks_spec_) {
      h.use_btf = t.btf && h.btf_available;
      h.loaded = h.spec.unwanted_because.empty() && (h.spec.required || t.optional);
      if (h.spec.raw_only) {
        bpf_program* p = find_program(obj, h.spec.base);
        if (!p) {
          destroy();
          return make_error(
              fmt::format("failed to load BPF {} tracer: program {} missing", concern_, h.spec.base));
        }
        bpf_program__set_autoload(p, h.loaded);
        continue;
      }
      bpf_program* pb = find_program(obj, h.spec.base + "_btf");
      bpf_program* pr = find_program(obj, h.spec.base + "_raw");
      if (!pb || !pr) {
        destroy();
        return make_error(
            fmt::format("failed to load BPF {} tracer: program {}_btf/_raw missing", concern_, h.spec.base));
      }
      bpf_program__set_autoload(pb, h.loaded && h.use_btf);
      bpf_program__set_autoload(pr, h.loaded && !h.use_btf);
    }
    int err = load();
    if (err == 0) {
      obj_ = obj;
      for (Hook& h : hooks_spec_) {
        if (h.btf_available && !h.use_btf) h.why_not_btf = "tp_btf rejected at load: " + first_error;
        if (!h.spec.unwanted_because.empty())
          h.why_not_loaded = h.spec.unwanted_because;
        else if (!h.loaded)
          h.why_not_loaded = "rejected at load: " + first_error;
      }
      return true;
    }
    destroy();
    last_error = fmt::format("load ({}): {}", t.what, errno_text(err));
    if (first_error.empty()) first_error = last_error;
  }
  return make_error(fmt::format("failed to load BPF {} tracer: {}", concern_, last_error));
}

Result<bool> TwinHooks::attach(bool hot) {
  detach();
  hooks_.clear();
  for (size_t i = 0; i < hooks_spec_.size(); ++i) {
    Hook& h = hooks_spec_[i];
    h.status = hooks_.size();
    // Its programs: the lone one, or the _btf twin then the _raw one.
    for (bool btf : h.spec.raw_only ? std::vector<bool>{false} : std::vector<bool>{true, false}) {
      HookStatus st;
      st.concern = concern_;
      st.program = h.spec.raw_only ? h.spec.base : h.spec.base + (btf ? "_btf" : "_raw");
      st.attach = (btf ? "tp_btf/" : "raw_tp/") + h.spec.tp;
      if (!h.loaded) {
        st.reason = h.why_not_loaded;
      } else if (btf != h.use_btf) {
        st.reason = btf ? h.why_not_btf : "not needed: twin " + h.spec.base + "_btf attached";
      }
      hooks_.push_back(st);
    }
    if (h.spec.hot && !hot) {
      detach_one(i, kHotStandby);
      continue;
    }
    if (auto a = attach_one(i, true); !a) return a;
  }
  hot_attached_ = hot;
  return true;
}

HookStatus& TwinHooks::chosen_status(size_t index) {
  const Hook& h = hooks_spec_[index];
  return hooks_[h.status + (h.spec.raw_only || h.use_btf ? 0 : 1)];
}

Result<bool> TwinHooks::attach_one(size_t index, bool required_fails) {
  const Hook& h = hooks_spec_[index];
  if (!h.loaded) return true;
  HookStatus& st = chosen_status(index);
  bpf_link* link = bpf_program__attach(find_program(obj_, st.program));
  if (!link) {
    int err = errno;
    std::string why = errno_text(err);
    if (err == ENOENT) why += " (no such tracepoint on this kernel)";
    if (h.spec.required && required_fails)
      return make_error(fmt::format("failed to attach {}: {}", st.program, why));
    st.active = false;
    st.reason = "attach failed: " + why;
    return true;
  }
  links_.emplace_back(index, link);
  st.active = true;
  st.reason = h.use_btf ? std::string() : h.spec.raw_caveat;
  return true;
}

void TwinHooks::detach_one(size_t index, const std::string& why) {
  for (auto it = links_.begin(); it != links_.end();) {
    if (it->first == index) {
      bpf_link__destroy(it->second);
      it = links_.erase(it);
    } else {
      ++it;
    }
  }
  const Hook& h = hooks_spec_[index];
  if (!h.loaded || hooks_.size() < h.status + (h.spec.raw_only ? 1 : 2)) return;
  HookStatus& st = chosen_status(index);
  st.active = false;
  st.reason = why;
}

Result<bool> TwinHooks::set_hot(bool on) {
  if (on == hot_attached_) return true;
  for (size_t i = 0; i < hooks_spec_.size(); ++i) {
    if (!hooks_spec_[i].spec.hot) continue;
    if (on) {
      // A required hot hook that fails now leaves the concern as it was:
      // the caller keeps sampling.
      if (auto a = attach_one(i, true); !a) {
        for (size_t k = 0; k < i; ++k)
          if (hooks_spec_[k].spec.hot) detach_one(k, kHotStandby);
        return a;
      }
    } else {
      detach_one(i, kHotStandby);
    }
  }
  hot_attached_ = on;
  return true;
}

void TwinHooks::detach() {
  for (auto& [index, l] : links_) bpf_link__destroy(l);
  links_.clear();
}

uint32_t page_shift() {
  long page = sysconf(_SC_PAGESIZE);
  uint32_t shift = 0;
  while (page > 1) {
    page >>= 1;
    ++shift;
  }
  return shift ? shift : 12;
}

}  // namespace hangtrace
