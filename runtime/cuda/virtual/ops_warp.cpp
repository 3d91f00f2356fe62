// Warp-collective instructions: shfl.sync (up/down/bfly/idx with clamp and segment mask),
// vote.sync (all/any/uni/ballot), activemask, match.{any,all}.sync, redux.sync, bar.warp.sync;
// the scheduling side of the tensor-core collectives (their work is in ops_mma.cpp).
#include <fmt/format.h>

#include "runtime/cuda/virtual/collective.h"
#include "runtime/cuda/virtual/fault.h"
#include "runtime/cuda/virtual/ops_util.h"

namespace kiln::cuda::vgpu {
namespace {

void park(ThreadState& t, const Instr& in) {
  t.status = Status::warp_wait;
  t.wait = &in;
  WarpKind kind = warp_kind(in);
  t.wait_mask = kind == WarpKind::activemask ? 0u
                : is_whole_warp(kind)        ? 0xffffffffu
                                             : static_cast<std::uint32_t>(t.r[in.s[3]]);
}

void shfl_group(ThreadState* const* lanes, std::uint32_t group) {
  std::uint64_t vals[32];
  for (int i = 0; i < 32; ++i)
    if (group >> i & 1) vals[i] = lanes[i]->r[lanes[i]->wait->s[0]];
  for (int i = 0; i < 32; ++i) {
    if (!(group >> i & 1)) continue;
    ThreadState& t = *lanes[i];
    const Instr& in = *t.wait;
    std::uint32_t b = get<std::uint32_t>(t, in.s[1]) & 31, c = get<std::uint32_t>(t, in.s[2]);
    int lane = i;
    int cval = static_cast<int>(c & 31), seg = static_cast<int>((c >> 8) & 31);
    int max_lane = (lane & seg) | (cval & ~seg);
    int min_lane = lane & seg;
    int j = lane;
    bool pval = false;
    switch (in.mod) {
      case 0:
        j = lane - static_cast<int>(b), pval = j >= max_lane;
        break;  // up
      case 1:
        j = lane + static_cast<int>(b), pval = j <= max_lane;
        break;  // down
      case 2:
        j = lane ^ static_cast<int>(b), pval = j <= max_lane;
        break;  // bfly
      case 3:
        j = min_lane | (static_cast<int>(b) & ~seg), pval = j <= max_lane;
        break;  // idx
    }
    if (!pval) j = lane;
    // A source lane outside the member mask gives an undefined value on hardware; programs
    // commonly discard it (partial-warp reductions), so it is not a fault: the lane keeps its own.
    if (!(group >> j & 1)) j = lane;
    t.r[in.d[0]] = static_cast<std::uint32_t>(vals[j]);
    t.r[in.d[1]] = pval;
  }
}

void vote_group(ThreadState* const* lanes, std::uint32_t group) {
  std::uint32_t ballot = 0;
  for (int i = 0; i < 32; ++i)
    if ((group >> i & 1) && get_pred(*lanes[i], *lanes[i]->wait, 0)) ballot |= 1u << i;
  for (int i = 0; i < 32; ++i) {
    if (!(group >> i & 1)) continue;
    ThreadState& t = *lanes[i];
    const Instr& in = *t.wait;
    switch (in.mod) {
      case 0:
        t.r[in.d[0]] = ballot == group;
        break;
      case 1:
        t.r[in.d[0]] = ballot != 0;
        break;
      case 2:
        t.r[in.d[0]] = ballot == group || ballot == 0;
        break;
      case 3:
        t.r[in.d[0]] = ballot;
        break;
    }
  }
}

void match_group(ThreadState* const* lanes, std::uint32_t group) {
  std::uint64_t vals[32];
  for (int i = 0; i < 32; ++i)
    if (group >> i & 1) {
      const Instr& in = *lanes[i]->wait;
      vals[i] = lanes[i]->r[in.s[0]];
      if (in.type != Type::b64) vals[i] &= 0xffffffffu;
    }
  for (int i = 0; i < 32; ++i) {
    if (!(group >> i & 1)) continue;
    ThreadState& t = *lanes[i];
    const Instr& in = *t.wait;
    std::uint32_t same = 0;
    for (int j = 0; j < 32; ++j)
      if ((group >> j & 1) && vals[j] == vals[i]) same |= 1u << j;
    if (in.mod == 0) {  // any
      t.r[in.d[0]] = same;
    } else {  // all
      bool all = same == group;
      t.r[in.d[0]] = all ? group : 0;
      t.r[in.d[1]] = all;
    }
  }
}

void redux_group(ThreadState* const* lanes, std::uint32_t group) {
  int first = std::countr_zero(group);
  const Instr& in0 = *lanes[first]->wait;
  bool is_signed_op = in0.type == Type::s32;
  std::int64_t acc = 0;
  bool init = false;
  for (int i = 0; i < 32; ++i) {
    if (!(group >> i & 1)) continue;
    std::uint32_t raw = get<std::uint32_t>(*lanes[i], lanes[i]->wait->s[0]);
    std::int64_t v = is_signed_op ? std::int64_t(std::int32_t(raw)) : std::int64_t(raw);
    if (!init) {
      acc = v, init = true;
      continue;
    }
    switch (in0.mod) {
      case 0:
        acc = std::int64_t(std::uint32_t(acc) + std::uint32_t(v));
        break;
      case 1:
        acc = std::min(acc, v);
        break;
      case 2:
        acc = std::max(acc, v);
        break;
      case 3:
        acc &= v;
        break;
      case 4:
        acc |= v;
        break;
      case 5:
        acc ^= v;
        break;
    }
  }
  for (int i = 0; i < 32; ++i)
    if (group >> i & 1) lanes[i]->r[lanes[i]->wait->d[0]] = std::uint32_t(acc);
}

void decode_mask(DecodeCtx& c, Instr& in, std::size_t i) {
  in.s[3] = c.src(c.op(i), Type::b32);
}

}  // namespace

const char* warp_kind_name(WarpKind k) {
  switch (k) {
    case WarpKind::shfl:
      return "shfl.sync";
    case WarpKind::vote:
      return "vote.sync";
    case WarpKind::activemask:
      return "activemask";
    case WarpKind::match:
      return "match.sync";
    case WarpKind::redux:
      return "redux.sync";
    case WarpKind::sync:
      return "bar.warp.sync";
    case WarpKind::elect:
      return "elect.sync";
    case WarpKind::mma:
      return "mma.sync.aligned";
    case WarpKind::ldmatrix:
      return "ldmatrix.sync.aligned";
  }
  return "?";
}

void execute_warp_group(ThreadState* const* lanes, std::uint32_t group) {
  int first = std::countr_zero(group);
  switch (warp_kind(*lanes[first]->wait)) {
    case WarpKind::shfl:
      shfl_group(lanes, group);
      break;
    case WarpKind::vote:
      vote_group(lanes, group);
      break;
    case WarpKind::match:
      match_group(lanes, group);
      break;
    case WarpKind::redux:
      redux_group(lanes, group);
      break;
    case WarpKind::activemask:
      for (int i = 0; i < 32; ++i)
        if (group >> i & 1) lanes[i]->r[lanes[i]->wait->d[0]] = group;
      break;
    case WarpKind::sync:
      break;
    case WarpKind::mma:
      execute_mma(lanes);
      break;
    case WarpKind::ldmatrix:
      execute_ldmatrix(lanes);
      break;
    case WarpKind::elect: {
      std::uint32_t leader = static_cast<std::uint32_t>(std::countr_zero(group));
      for (int i = 0; i < 32; ++i)
        if (group >> i & 1) {
          lanes[i]->r[lanes[i]->wait->d[0]] = leader;
          lanes[i]->r[lanes[i]->wait->d[1]] = static_cast<std::uint32_t>(i) == leader;
        }
      break;
    }
  }
}

// Warp collectives park their thread until every lane of the member mask has arrived.
void park_as(Instr& in, WarpKind kind) {
  in.fn = park;
  in.flags |= kFlagMayStop;
  in.aux = static_cast<std::uint32_t>(kind);
}

// A destination that is a value or a `{value, predicate}` pair (shfl and match may return both).
void decode_value_and_predicate(DecodeCtx& c, Instr& in, const ast::Operand& d) {
  if (d.kind == ast::Operand::kPair) {
    in.d[0] = c.dst(d.elems[0]);
    in.d[1] = c.dst(d.elems[1]);
  } else {
    in.d[0] = c.dst(d);
  }
}

void decode_bar_warp_sync(DecodeCtx& c, OpcodeParts& info, Instr& in) {
  info.take("warp");
  info.take("sync");
  park_as(in, WarpKind::sync);
  decode_mask(c, in, 0);
}

void add_warp_decoders(DecoderTable& table) {
  table["shfl"] = [](DecodeCtx& c, OpcodeParts& info, Instr& in) {
    if (!info.take("sync")) c.fail("only shfl.sync is supported (sm_70+)");
    int mode = info.take_one({"up", "down", "bfly", "idx"});
    if (mode < 0) c.fail("missing shuffle mode");
    in.mod = static_cast<std::uint8_t>(mode);
    in.type = info.type();
    park_as(in, WarpKind::shfl);
    decode_value_and_predicate(c, in, c.op(0));
    in.s[0] = c.src(c.op(1), Type::b32);
    in.s[1] = c.src(c.op(2), Type::b32);
    in.s[2] = c.src(c.op(3), Type::b32);
    decode_mask(c, in, 4);
  };
  table["vote"] = [](DecodeCtx& c, OpcodeParts& info, Instr& in) {
    if (!info.take("sync")) c.fail("only vote.sync is supported (sm_70+)");
    int mode = info.take_one({"all", "any", "uni", "ballot"});
    if (mode < 0) c.fail("missing vote mode");
    in.mod = static_cast<std::uint8_t>(mode);
    park_as(in, WarpKind::vote);
    in.d[0] = c.dst(c.op(0));
    in.s[0] = c.pred_src(c.op(1), in, 0);
    decode_mask(c, in, 2);
  };
  table["activemask"] = [](DecodeCtx& c, OpcodeParts&, Instr& in) {
    park_as(in, WarpKind::activemask);
    in.d[0] = c.dst(c.op(0));
  };
  table["match"] = [](DecodeCtx& c, OpcodeParts& info, Instr& in) {
    int mode = info.take_one({"any", "all"});
    if (!info.take("sync") || mode < 0) c.fail("expected match.any.sync or match.all.sync");
    in.mod = static_cast<std::uint8_t>(mode);
    in.type = info.type();
    park_as(in, WarpKind::match);
    decode_value_and_predicate(c, in, c.op(0));
    in.s[0] = c.src(c.op(1), in.type);
    decode_mask(c, in, 2);
  };
  table["elect"] = [](DecodeCtx& c, OpcodeParts& info, Instr& in) {
    if (!info.take("sync")) c.fail("expected elect.sync");
    park_as(in, WarpKind::elect);
    decode_value_and_predicate(c, in, c.op(0));
    decode_mask(c, in, 1);
  };
  table["redux"] = [](DecodeCtx& c, OpcodeParts& info, Instr& in) {
    if (!info.take("sync")) c.fail("expected redux.sync");
    int op = info.take_one({"add", "min", "max", "and", "or", "xor"});
    if (op < 0) c.fail("missing reduction");
    in.type = info.type();
    if (in.type != Type::u32 && in.type != Type::s32 && in.type != Type::b32)
      c.fail("only 32-bit integer redux is implemented");
    in.mod = static_cast<std::uint8_t>(op);
    park_as(in, WarpKind::redux);
    in.d[0] = c.dst(c.op(0));
    in.s[0] = c.src(c.op(1), in.type);
    decode_mask(c, in, 2);
  };
}

}  // namespace kiln::cuda::vgpu
