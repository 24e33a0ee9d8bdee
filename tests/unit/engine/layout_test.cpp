#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "ddo/engine/engine_counters.hpp"
#include "ddo/engine/group_layout.hpp"
#include "ddo/error.hpp"
#include "unit/engine/fake_source.hpp"

using namespace ddo::engine;

TEST(ExecutionGroups, SplitHalfAndLeaf) {
    std::vector<GroupDecl> d{{"b0", {"b0.attn.q.weight", "b0.attn.q.bias", "b0.mlp.up.weight"}, {"attn", "attn", "mlp"}}};
    auto half = split_groups(d, Granularity::half);
    ASSERT_EQ(half.size(), 2u);
    EXPECT_EQ(half[0].name, "b0/attn");
    EXPECT_EQ(half[0].tensors.size(), 2u);
    EXPECT_EQ(half[1].name, "b0/mlp");
    auto leaf = split_groups(d, Granularity::leaf);
    ASSERT_EQ(leaf.size(), 2u);
    EXPECT_EQ(leaf[0].name, "b0/b0.attn.q");
    EXPECT_EQ(leaf[1].name, "b0/b0.mlp.up");
    EXPECT_EQ(split_groups(d, Granularity::block).size(), 1u);
}

// A leaf's tensors declared apart (every weight, then every bias: Gemma-3's and Qwen3's attention biases) form one
// leaf group, at its first tensor's place: one name each, nothing declared twice (issue 40 item 8).
TEST(ExecutionGroups, LeafGathersAWeightAndItsBiasDeclaredApart) {
    std::vector<GroupDecl> d{{"layers.0", {"l0.q.weight", "l0.k.weight", "l0.norm.weight", "l0.q.bias", "l0.k.bias"}, {}}};
    const auto leaf = split_groups(d, Granularity::leaf);
    ASSERT_EQ(leaf.size(), 3u);
    EXPECT_EQ(leaf[0].name, "layers.0/l0.q");
    EXPECT_EQ(leaf[0].tensors, (std::vector<std::string>{"l0.q.weight", "l0.q.bias"}));
    EXPECT_EQ(leaf[1].name, "layers.0/l0.k");
    EXPECT_EQ(leaf[1].tensors, (std::vector<std::string>{"l0.k.weight", "l0.k.bias"}));
    EXPECT_EQ(leaf[2].name, "layers.0/l0.norm");
    FakeSource s;
    for (const auto & t : d[0].tensors) s.add(t, 64);
    const auto l = ModelLayout::build(d, s, Granularity::leaf);
    EXPECT_EQ(l.size(), 3u);
    EXPECT_EQ(l.group_of("l0.q.bias"), l.group_of("l0.q.weight"));
}

TEST(ExecutionGroups, RejectsDuplicateTensorAndBadParts) {
    EXPECT_THROW(split_groups({{"a", {"x"}, {}}, {"b", {"x"}, {}}}, Granularity::block), ddo::UsageError);
    EXPECT_THROW(split_groups({{"a", {"x", "y"}, {"attn"}}}, Granularity::half), ddo::UsageError);
}

TEST(GroupLayout, Aligned256AndContiguous) {
    FakeSource s;
    s.add("a", 10);
    s.add("b", 300);
    s.add("c", 256);
    auto l = ModelLayout::build({{"g", {"a", "b", "c"}, {}}}, s);
    const auto & g = l.group(0);
    EXPECT_EQ(g.tensors[0].offset, 0u);
    EXPECT_EQ(g.tensors[1].offset, 256u);
    EXPECT_EQ(g.tensors[2].offset, 768u);
    EXPECT_EQ(g.bytes, 1024u);
    for (const auto & t : g.tensors) EXPECT_EQ(t.offset % kGroupAlignment, 0u);
    EXPECT_EQ(l.group_of("b"), 0u);
    EXPECT_THROW(ModelLayout::build({{"g", {"missing"}, {}}}, s), ddo::RuntimeError);
}

TEST(EngineCounters, UnavailableIsNullWithReason) {
    EngineCounters c;
    c.upload_event_reason = "CPU transport";
    c.stall_reason = "why";
    auto j = c.to_json();
    EXPECT_TRUE(j["upload_event_s"].is_null());
    EXPECT_EQ(j["upload_event_s_reason"], "CPU transport");
    EXPECT_TRUE(j["stall_s"].is_null());
    c.stall_s = 0.5;
    EXPECT_EQ(c.to_json()["stall_s"], 0.5);
}
