// gpt_train --ddp: the GPT demo data-parallel under `kiln launch -n N` (Gloo). Each rank trains
// on its 1/N of every batch with DistributedDataParallel, so the loss curve is that of one
// process on the whole batch; the losses printed are averaged over ranks, and only rank 0 prints.
#pragma once

#include <cstdio>
#include <memory>

#include "autograd/nn.h"
#include "demos/gpt_model.h"
#if KILN_HAVE_DIST
#include "dist/ddp.h"
#endif

namespace kiln::gpt {

#if KILN_HAVE_DIST
class DataParallel {
 public:
  explicit DataParallel(nn::Module& model) : ddp_(model) {}
  // The mean of every rank's loss: the loss on the whole batch.
  double mean(double loss) const {
    Tensor t = full({1}, Scalar(loss), DType::f64);
    dist::all_reduce(t, dist::ReduceOp::avg);
    return t.item();
  }

 private:
  dist::DistributedDataParallel ddp_;
};

// Joins the ranks `kiln launch` started and gives this one its shard; rank 0 alone prints.
inline void join_ranks(TrainConfig& train) {
  dist::init_process_group("gloo");
  train.shard = dist::rank();
  train.shards = dist::world_size();
  KILN_CHECK(train.batch % train.shards == 0,
             "gpt_train --ddp: --batch {} is not a multiple of the {} ranks", train.batch,
             train.shards);
  if (dist::rank() != 0) std::freopen("/dev/null", "w", stdout);
}
inline void leave_ranks() {
  dist::destroy_process_group();
}
#else
class DataParallel {
 public:
  explicit DataParallel(nn::Module&) {}
  double mean(double loss) const { return loss; }
};
inline void join_ranks(TrainConfig&) {
  throw Error(
      "gpt_train --ddp: this build has no kiln::dist (Gloo was not found when it "
      "was configured: scripts/setup installs libgloo-dev)");
}
inline void leave_ranks() {}
#endif

}  // namespace kiln::gpt
