// Builtin device functions (see builtins.h). printf output goes to stdout, formatted on the host
// from the argument buffer NVRTC builds (each argument aligned to its own size).
#include "runtime/cuda/virtual/builtins.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstring>
#include <string>

#include "runtime/cuda/virtual/fault.h"

namespace kiln::cuda::vgpu {
namespace {

// Argument `i` of the call: the bytes of the caller's param variable.
template <class T>
T arg(ThreadState& t, const Instr& in, const CallSite& cs, std::size_t i) {
  if (i >= cs.arg_slots.size()) fault(t, in, "builtin called with too few arguments");
  std::uint64_t a = t.r[cs.arg_slots[i]] + static_cast<std::uint64_t>(cs.arg_offsets[i]);
  return load_as<T>(resolve(t, in, Space::param, a, 1, Access::load));
}

void set_ret(ThreadState& t, const CallSite& cs, const void* value, std::size_t bytes) {
  if (!cs.has_ret) return;
  std::uint64_t a = t.r[cs.ret_slot] + static_cast<std::uint64_t>(cs.ret_offset) - kParamStackBase;
  if (a + bytes <= t.params.size()) std::memcpy(t.params.data() + a, value, bytes);
}

std::string read_string(ThreadState& t, const Instr& in, std::uint64_t addr) {
  std::string s;
  for (std::size_t i = 0; i < 4096; ++i) {
    char c = static_cast<char>(*resolve(t, in, Space::generic, addr + i, 1, Access::load));
    if (!c) break;
    s += c;
  }
  return s;
}

std::string format_printf(ThreadState& t, const Instr& in, const std::string& f,
                          std::uint64_t args) {
  std::string out;
  std::uint64_t off = 0;
  auto take = [&](unsigned bytes) {
    off = (off + bytes - 1) / bytes * bytes;
    const std::uint8_t* p = resolve(t, in, Space::generic, args + off, bytes, Access::load);
    off += bytes;
    std::uint64_t v = 0;
    std::memcpy(&v, p, bytes);
    return v;
  };
  for (std::size_t i = 0; i < f.size(); ++i) {
    if (f[i] != '%') {
      out += f[i];
      continue;
    }
    std::size_t j = i + 1;
    while (j < f.size() && std::strchr("-+ #0123456789.*", f[j])) ++j;
    int longs = 0;
    while (j < f.size() && std::strchr("lhzjt", f[j])) longs += f[j] == 'l' || f[j] == 'z', ++j;
    if (j >= f.size()) break;
    char conv = f[j];
    std::string spec = f.substr(i, j - i);
    spec.erase(std::remove_if(spec.begin(), spec.end(),
                              [](char c) { return std::strchr("lhzjt", c) != nullptr; }),
               spec.end());
    char buf[512];
    switch (conv) {
      case '%':
        out += '%';
        break;
      case 'd':
      case 'i': {
        long long v = longs ? static_cast<long long>(take(8))
                            : static_cast<long long>(static_cast<std::int32_t>(take(4)));
        std::snprintf(buf, sizeof buf, (spec + "lld").c_str(), v);
        out += buf;
        break;
      }
      case 'u':
      case 'x':
      case 'X':
      case 'o':
      case 'c': {
        unsigned long long v = longs ? take(8) : static_cast<std::uint32_t>(take(4));
        std::snprintf(buf, sizeof buf,
                      (spec + (conv == 'c' ? "c" : std::string("ll") + conv)).c_str(), v);
        if (conv == 'c') std::snprintf(buf, sizeof buf, (spec + "c").c_str(), static_cast<int>(v));
        out += buf;
        break;
      }
      case 'f':
      case 'F':
      case 'e':
      case 'E':
      case 'g':
      case 'G':
      case 'a':
      case 'A': {
        double v = std::bit_cast<double>(take(8));
        std::snprintf(buf, sizeof buf, (spec + conv).c_str(), v);
        out += buf;
        break;
      }
      case 's':
        out += read_string(t, in, take(8));
        break;
      case 'p':
        out += fmt::format("{:#x}", take(8));
        break;
      default:
        out += spec + conv;
        break;
    }
    i = j;
  }
  return out;
}

}  // namespace

void call_builtin(ThreadState& t, const Instr& in, const Function& callee, const CallSite& cs) {
  const std::string& name = callee.name;
  if (name == "vprintf") {
    std::string f = read_string(t, in, arg<std::uint64_t>(t, in, cs, 0));
    std::string s = format_printf(t, in, f, arg<std::uint64_t>(t, in, cs, 1));
    std::fwrite(s.data(), 1, s.size(), stdout);
    std::fflush(stdout);
    std::int32_t n = static_cast<std::int32_t>(s.size());
    set_ret(t, cs, &n, 4);
    return;
  }
  if (name == "__assertfail") {
    std::string msg = read_string(t, in, arg<std::uint64_t>(t, in, cs, 0));
    std::string file = read_string(t, in, arg<std::uint64_t>(t, in, cs, 1));
    auto line = arg<std::uint32_t>(t, in, cs, 2);
    std::string func = read_string(t, in, arg<std::uint64_t>(t, in, cs, 3));
    fault(t, in, fmt::format("device assertion '{}' failed at {}:{} in {}", msg, file, line, func));
  }
  if (name == "malloc") {
    auto size = arg<std::uint64_t>(t, in, cs, 0);
    std::uint64_t p = t.launch->memory->alloc(size, "device malloc", t.launch->check_init);
    t.launch->clear_hits();
    set_ret(t, cs, &p, 8);
    return;
  }
  if (name == "free") {
    auto p = arg<std::uint64_t>(t, in, cs, 0);
    try {
      t.launch->memory->free(p);
    } catch (const Error& e) {
      fault(t, in, std::string("device free failed: ") + e.what());
    }
    t.launch->clear_hits();
    return;
  }
  fault(t, in,
        fmt::format("call of external function '{}', which the virtual GPU does not "
                    "provide",
                    name));
}

}  // namespace kiln::cuda::vgpu
