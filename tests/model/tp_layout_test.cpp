// tp_layout (model/tp_layout.h): which heads, intermediate rows and
// vocabulary rows each tensor-parallel rank holds. Over every head count
// pair (H, K) with H a multiple of K up to 32 heads and every T up to 8,
// checks the properties the sharded forward relies on:
// - every query head is held by exactly one rank, every KV head by at
//   least one, and a rank's query heads read their own KV head (local GQA:
//   local query head j reads local KV head j / (q_heads / kv_heads));
// - every rank has the same local counts (the layers' shapes are one);
// - the intermediate rows are split exactly once, padding only at the end;
// - the vocabulary is split when T divides it, else replicated;
// and a few layouts in full, with their log lines.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "model/tp_layout.h"

namespace troupe {
namespace {

model_config config_of(int64_t heads, int64_t kv_heads, int64_t intermediate = 256,
                       int64_t vocab = 1024) {
  model_config m;
  m.num_attention_heads = heads;
  m.num_key_value_heads = kv_heads;
  m.head_dim = 16;
  m.hidden_size = 128;
  m.intermediate_size = intermediate;
  m.vocab_size = vocab;
  return m;
}

std::vector<tp_layout> layouts(const model_config& m, int size) {
  std::vector<tp_layout> out;
  for (int r = 0; r < size; ++r) {
    auto l = make_tp_layout(m, size, r);
    EXPECT_TRUE(static_cast<bool>(l)) << l.error_message();
    out.push_back(l.value());
  }
  return out;
}

TEST(tp_layout, every_head_once_with_its_own_kv_head_for_all_small_shapes) {
  for (int64_t kv = 1; kv <= 16; ++kv) {
    for (int64_t group = 1; kv * group <= 32; ++group) {
      const int64_t heads = kv * group;
      for (int t = 1; t <= 8; ++t) {
        const std::string where = "H " + std::to_string(heads) + " K " + std::to_string(kv) +
                                  " T " + std::to_string(t);
        const model_config m = config_of(heads, kv, 100);
        std::map<int64_t, int> q_count;
        std::set<int64_t> kv_seen;
        const auto ranks = layouts(m, t);
        for (const tp_layout& l : ranks) {
          ASSERT_EQ(l.q_heads, ranks[0].q_heads) << where;
          ASSERT_EQ(l.kv_heads, ranks[0].kv_heads) << where;
          ASSERT_EQ(static_cast<int64_t>(l.q_head_of.size()), l.q_heads) << where;
          ASSERT_EQ(static_cast<int64_t>(l.kv_head_of.size()), l.kv_heads) << where;
          ASSERT_EQ(l.q_heads % l.kv_heads, 0) << where;
          const int64_t local_group = l.q_heads / l.kv_heads;
          for (int64_t j = 0; j < l.q_heads; ++j) {
            const int64_t q = l.q_head_of[static_cast<size_t>(j)];
            if (q < 0) continue;
            ++q_count[q];
            // The KV head this query head reads here is the one it reads
            // in the whole model.
            EXPECT_EQ(l.kv_head_of[static_cast<size_t>(j / local_group)], q / group) << where;
          }
          for (int64_t k : l.kv_head_of) {
            if (k >= 0) kv_seen.insert(k);
          }
        }
        ASSERT_EQ(static_cast<int64_t>(q_count.size()), heads) << where;
        for (const auto& [q, count] : q_count) EXPECT_EQ(count, 1) << where << " head " << q;
        EXPECT_EQ(static_cast<int64_t>(kv_seen.size()), kv) << where;
        // No more padding than needed: without it when T divides K, or K
        // divides T and T / K divides the group.
        const bool even = kv % t == 0 || (t % kv == 0 && group % (t / kv) == 0);
        EXPECT_EQ(ranks[0].q_heads * t == heads, even) << where;
      }
    }
  }
}

TEST(tp_layout, intermediate_rows_are_split_once_and_padded_at_the_end) {
  for (int64_t inter : {96, 100, 256, 14336}) {
    for (int t = 1; t <= 8; ++t) {
      std::vector<int> covered(static_cast<size_t>(inter), 0);
      for (const tp_layout& l : layouts(config_of(8, 8, inter), t)) {
        EXPECT_EQ(l.intermediate, (inter + t - 1) / t);
        int64_t real = 0;
        for (const shard_run& run : l.intermediate_runs(inter)) {
          EXPECT_EQ(run.dst, 0);  // the padding is at the end of the rank's rows
          for (int64_t i = 0; i < run.count; ++i) ++covered[static_cast<size_t>(run.src + i)];
          real += run.count;
        }
        EXPECT_LE(real, l.intermediate);
      }
      for (int c : covered) ASSERT_EQ(c, 1) << inter << " T " << t;
    }
  }
}

// Each expert's rows of a mixture-of-experts model: split and padded as
// the dense intermediate rows, every expert alike; none for a dense model.
TEST(tp_layout, each_experts_rows_are_split_once_and_padded_at_the_end) {
  for (int64_t inter : {64, 192, 768}) {
    for (int t = 1; t <= 8; ++t) {
      model_config m = config_of(8, 8);
      m.moe.num_experts = 8;
      m.moe.top_k = 2;
      m.moe.intermediate = inter;
      std::vector<int> covered(static_cast<size_t>(inter), 0);
      for (const tp_layout& l : layouts(m, t)) {
        EXPECT_EQ(l.expert_intermediate, (inter + t - 1) / t);
        EXPECT_EQ(l.padded(m), inter % t != 0 || 256 % t != 0) << inter << " T " << t;
        for (const shard_run& run : l.expert_intermediate_runs(inter)) {
          EXPECT_EQ(run.dst, 0);
          for (int64_t i = 0; i < run.count; ++i) ++covered[static_cast<size_t>(run.src + i)];
        }
      }
      for (int c : covered) ASSERT_EQ(c, 1) << inter << " T " << t;
    }
  }
  for (const tp_layout& l : layouts(config_of(8, 8), 2)) EXPECT_EQ(l.expert_intermediate, 0);
}

TEST(tp_layout, vocabulary_is_split_when_t_divides_it) {
  const auto split = layouts(config_of(8, 2, 256, 1024), 4);
  for (int r = 0; r < 4; ++r) {
    EXPECT_TRUE(split[static_cast<size_t>(r)].vocab_parallel);
    EXPECT_EQ(split[static_cast<size_t>(r)].vocab, 256);
    EXPECT_EQ(split[static_cast<size_t>(r)].vocab_begin, 256 * r);
  }
  for (const tp_layout& l : layouts(config_of(8, 2, 256, 1000), 3)) {
    EXPECT_FALSE(l.vocab_parallel);
    EXPECT_EQ(l.vocab, 1000);
    EXPECT_EQ(l.vocab_begin, 0);
  }
  EXPECT_FALSE(layouts(config_of(8, 2), 1)[0].vocab_parallel);  // one rank: nothing to gather
}

TEST(tp_layout, padded_layouts_in_full) {
  // 4 query heads over 2 KV heads on 8 ranks: each KV head on 4 ranks,
  // its 2 query heads padded to 4, one a rank.
  const auto qwen = layouts(config_of(4, 2, 320), 8);
  EXPECT_EQ(qwen[0].q_head_of, (std::vector<int64_t>{0}));
  EXPECT_EQ(qwen[1].q_head_of, (std::vector<int64_t>{1}));
  EXPECT_EQ(qwen[2].q_head_of, (std::vector<int64_t>{-1}));
  EXPECT_EQ(qwen[5].q_head_of, (std::vector<int64_t>{3}));
  EXPECT_EQ(qwen[5].kv_head_of, (std::vector<int64_t>{1}));
  EXPECT_EQ(qwen[5].kv_replicas, 4);
  EXPECT_EQ(describe(qwen[2], config_of(4, 2, 320)),
            "rank 2/8: 1 query heads (1 padding), 1 of 2 KV heads (each on 4 ranks), "
            "intermediate 40 of 320, vocabulary rows 256..383");
  // 2 KV heads on 3 ranks: padded to 3, the third rank's all padding.
  const auto three = layouts(config_of(8, 2, 256, 1024), 3);
  EXPECT_EQ(three[1].q_head_of, (std::vector<int64_t>{4, 5, 6, 7}));
  EXPECT_EQ(three[2].q_head_of, (std::vector<int64_t>{-1, -1, -1, -1}));
  EXPECT_EQ(three[2].kv_head_of, (std::vector<int64_t>{-1}));
  EXPECT_EQ(describe(three[2], config_of(8, 2, 256, 1024)),
            "rank 2/3: 4 query heads (4 padding), 1 of 2 KV heads (1 padding), intermediate 86 "
            "of 256, vocabulary replicated");
  // 8 KV heads on 3 ranks: 9, three a rank.
  const auto mha = layouts(config_of(8, 8), 3);
  EXPECT_EQ(mha[2].kv_head_of, (std::vector<int64_t>{6, 7, -1}));
  EXPECT_EQ(mha[2].q_head_of, (std::vector<int64_t>{6, 7, -1}));
  EXPECT_EQ(tp_layout::head_runs(mha[2].q_head_of, 16), (std::vector<shard_run>{{0, 96, 32}}));
}

// vLLM's get_pp_indices: layers / P a stage, the remainder one more each
// to the stages before the last, from the last but one backwards.
TEST(tp_layout, pipeline_stages_split_the_layers_as_vllm) {
  const auto sizes = [](int64_t layers, int stages) {
    std::vector<int64_t> out;
    int64_t next = 0;
    for (int s = 0; s < stages; ++s) {
      const stage_layers l = pipeline_stage_layers(layers, stages, s);
      EXPECT_EQ(l.begin, next) << layers << " / " << stages;
      next = l.end;
      out.push_back(l.end - l.begin);
    }
    EXPECT_EQ(next, layers);
    return out;
  };
  EXPECT_EQ(sizes(3, 2), (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(sizes(4, 4), (std::vector<int64_t>{1, 1, 1, 1}));
  EXPECT_EQ(sizes(5, 4), (std::vector<int64_t>{1, 1, 2, 1}));
  EXPECT_EQ(sizes(80, 3), (std::vector<int64_t>{27, 27, 26}));
  EXPECT_EQ(sizes(32, 1), (std::vector<int64_t>{32}));
}

TEST(tp_layout, the_sizes_without_padding_and_the_errors) {
  EXPECT_EQ(unpadded_tp_sizes(config_of(32, 8, 14336, 128256), 8), (std::vector<int>{1, 2, 4, 8}));
  EXPECT_EQ(unpadded_tp_sizes(config_of(14, 2, 4864, 151936), 8), (std::vector<int>{1, 2}));
  EXPECT_EQ(make_tp_layout(config_of(8, 2), 0, 0).error_message(),
            "tensor_parallel_size must be at least 1, got 0");
  EXPECT_EQ(make_tp_layout(config_of(8, 2), 2, 2).error_message(),
            "tensor-parallel rank 2 is outside 0..1");
  EXPECT_EQ(make_tp_layout(config_of(8, 3), 2, 0).error_message(),
            "tensor parallelism needs num_attention_heads (8) a multiple of "
            "num_key_value_heads (3)");
}

}  // namespace
}  // namespace troupe
