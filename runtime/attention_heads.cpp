// Shapes of grouped-query attention (see attention_heads.h).
#include "runtime/attention_heads.h"

#include <fmt/format.h>

#include "runtime/error.h"

namespace kiln {

namespace {

// dim -3 of a [..., rows, cols] operand, or 1 where it has none.
std::int64_t heads_of(const Shape& s) {
  return s.size() >= 3 ? s[s.size() - 3] : 1;
}

}  // namespace

std::int64_t attention_group(const Shape& q, const Shape& k, const Shape& v, std::string_view op) {
  std::int64_t h = heads_of(q), hk = heads_of(k), hv = heads_of(v);
  KILN_CHECK_AS(ShapeError, hk == hv || hk == 1 || hv == 1,
                "{}: k and v have different numbers of heads ({} and {}; q {}, k {}, v {})", op, hk,
                hv, shape_str(q), shape_str(k), shape_str(v));
  std::int64_t kv = std::max(hk, hv);
  if (kv <= 1 || h <= 1 || kv == h) return 1;
  KILN_CHECK_AS(ShapeError, h % kv == 0,
                "{}: q's {} heads are not a multiple of k and v's {} (grouped-query attention "
                "needs H % Hkv == 0; q {}, k {}, v {})",
                op, h, kv, shape_str(q), shape_str(k), shape_str(v));
  return h / kv;
}

Shape grouped_query_shape(const Shape& s, std::int64_t group, std::size_t trailing) {
  if (s.size() <= trailing) return s;
  std::size_t at = s.size() - trailing - 1;
  Shape r(s.begin(), s.begin() + static_cast<std::ptrdiff_t>(at));
  if (s[at] == 1) {
    r.insert(r.end(), {1, 1});
  } else {
    r.insert(r.end(), {s[at] / group, group});
  }
  r.insert(r.end(), s.begin() + static_cast<std::ptrdiff_t>(at + 1), s.end());
  return r;
}

Shape grouped_kv_shape(const Shape& s, std::size_t trailing) {
  if (s.size() <= trailing) return s;
  Shape r = s;
  r.insert(r.end() - static_cast<std::ptrdiff_t>(trailing), 1);
  return r;
}

Shape ungrouped_shape(const Shape& s, std::size_t trailing) {
  std::size_t at = s.size() - trailing - 2;
  Shape r(s.begin(), s.begin() + static_cast<std::ptrdiff_t>(at));
  r.push_back(s[at] * s[at + 1]);
  r.insert(r.end(), s.begin() + static_cast<std::ptrdiff_t>(at + 2), s.end());
  return r;
}

}  // namespace kiln
