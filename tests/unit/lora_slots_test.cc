// engine/lora_selection.h: the LoRA slots (creation adapters, then runtime
// ones loaded and unloaded), a request's selection and its cache root.
#include <gtest/gtest.h>

#include <memory>

#include "engine/lora_selection.h"
#include "model/lora.h"

namespace infera {
namespace {

std::shared_ptr<LoraAdapter> Adapter(const std::string& name, float default_scale = 1.0f) {
  auto a = std::make_shared<LoraAdapter>();
  a->name = name;
  a->path = "/adapters/" + name;
  a->default_scale = default_scale;
  return a;
}

RequestParams Named(const std::string& name) {
  RequestParams p;
  p.lora_adapter = name;
  return p;
}

class LoraSlotsTest : public ::testing::Test {
 protected:
  LoraSlotsTest() {
    opts_.lora_adapters = {fixed_.get()};
    opts_.max_runtime_loras = 2;
  }
  std::shared_ptr<LoraAdapter> fixed_ = Adapter("fixed", 0.5f);
  EngineOptions opts_;
};

TEST_F(LoraSlotsTest, DefaultsAndNamesSelectTheRightSlots) {
  LoraSlots slots(opts_);
  ASSERT_EQ(slots.n_slots(), 3u);
  EXPECT_EQ(slots.adapters(), (std::vector<const LoraAdapter*>{fixed_.get(), nullptr, nullptr}));
  StatusOr<LoraSelection> d = slots.Select(RequestParams{});
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->scales, (std::vector<float>{0.5f, 0.0f, 0.0f}));  // runtime slots off by default
  auto a = Adapter("a");
  StatusOr<int32_t> slot = slots.Load(a);
  ASSERT_TRUE(slot.ok()) << slot.status().message();
  EXPECT_EQ(*slot, 1);
  EXPECT_EQ(slots.adapters()[1], a.get());
  StatusOr<LoraSelection> s = slots.Select(Named("a"));
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->scales, (std::vector<float>{0.0f, 1.0f, 0.0f}));  // alone, at 1
  EXPECT_NE(s->cache_root, 0u);
  EXPECT_NE(s->cache_root, d->cache_root);
  EXPECT_EQ(slots.Select(Named("fixed"))->scales, (std::vector<float>{1.0f, 0.0f, 0.0f}));
  EXPECT_EQ(slots.Select(Named("b")).status().code(), StatusCode::kNotFound);
  RequestParams by_scale;
  by_scale.lora_scales = {0.0f, 0.0f, 1.0f};  // slot 2 holds nothing
  EXPECT_EQ(slots.Select(by_scale).status().code(), StatusCode::kNotFound);
  by_scale.lora_scales = {0.0f, 0.0f, 0.0f};
  EXPECT_TRUE(slots.Select(by_scale)->scales.empty());  // every adapter off: the plain model's cache
  EXPECT_EQ(slots.Select(by_scale)->cache_root, 0u);
}

TEST_F(LoraSlotsTest, LoadRefusesDuplicatesAndFullSlots) {
  LoraSlots slots(opts_);
  ASSERT_TRUE(slots.Load(Adapter("a")).ok());
  EXPECT_EQ(slots.Load(Adapter("a")).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(slots.Load(Adapter("fixed")).status().code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(slots.Load(Adapter("b")).ok());
  EXPECT_EQ(slots.Load(Adapter("c")).status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(slots.Unload("fixed").status().code(), StatusCode::kInvalidArgument);  // given at creation
  EXPECT_EQ(slots.Unload("zzz").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(slots.Load(nullptr).status().code(), StatusCode::kInvalidArgument);
  EngineOptions none;
  none.lora_adapters = {fixed_.get()};
  EXPECT_EQ(LoraSlots(none).Load(Adapter("a")).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(LoraSlotsTest, UnloadedSlotDrainsBeforeReuseAndReloadGetsANewCacheRoot) {
  LoraSlots slots(opts_);
  auto first = Adapter("a");
  ASSERT_EQ(*slots.Load(first), 1);
  const uint64_t root_first = slots.Select(Named("a"))->cache_root;
  ASSERT_TRUE(slots.Load(Adapter("b")).ok());
  ASSERT_EQ(*slots.Unload("a"), 1);
  EXPECT_TRUE(slots.draining());
  // New requests cannot select it, by name or by scale; the running ones keep it.
  EXPECT_EQ(slots.Select(Named("a")).status().code(), StatusCode::kNotFound);
  RequestParams by_scale;
  by_scale.lora_scales = {0.0f, 1.0f, 0.0f};
  EXPECT_EQ(slots.Select(by_scale).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(slots.adapters()[1], first.get());
  EXPECT_EQ(slots.Unload("a").status().code(), StatusCode::kNotFound);  // (once)
  // Its name is free at once, its slot only once no request uses it.
  EXPECT_EQ(slots.Load(Adapter("a")).status().code(), StatusCode::kResourceExhausted);
  slots.FreeDrained({0, 1, 0});  // slot 1 still in use
  EXPECT_TRUE(slots.draining());
  EXPECT_EQ(slots.adapters()[1], first.get());
  slots.FreeDrained({0, 0, 1});
  EXPECT_FALSE(slots.draining());
  EXPECT_EQ(slots.adapters()[1], nullptr);
  // The same name and slot again: another adapter, so another cache root
  // (the old adapter's K/V must never be found for it).
  ASSERT_EQ(*slots.Load(Adapter("a")), 1);
  const uint64_t root_second = slots.Select(Named("a"))->cache_root;
  EXPECT_NE(root_second, root_first);
}

TEST_F(LoraSlotsTest, ReplaceInPlaceOrBesideTheRunningOne) {
  LoraSlots slots(opts_);
  auto a1 = Adapter("a"), a2 = Adapter("a"), a3 = Adapter("a");
  a2->path = "/adapters/a-v2";
  a3->path = "/adapters/a-v3";
  ASSERT_EQ(*slots.Load(a1), 1);
  const uint64_t root1 = slots.Select(Named("a"))->cache_root;
  // Unused: the same slot, a new identity.
  ASSERT_EQ(*slots.Replace(a2, {0, 0, 0}), 1);
  EXPECT_EQ(slots.adapters()[1], a2.get());
  const uint64_t root2 = slots.Select(Named("a"))->cache_root;
  EXPECT_NE(root2, root1);
  EXPECT_FALSE(slots.draining());
  // In use: a free slot for the new one while the old drains.
  ASSERT_EQ(*slots.Replace(a3, {0, 1, 0}), 2);
  EXPECT_TRUE(slots.draining());
  EXPECT_EQ(slots.Select(Named("a"))->scales, (std::vector<float>{0.0f, 0.0f, 1.0f}));
  slots.FreeDrained({0, 0, 1});
  EXPECT_EQ(slots.adapters()[1], nullptr);
  // In use and no slot free: nothing changes.
  ASSERT_TRUE(slots.Load(Adapter("b")).ok());
  auto a4 = Adapter("a");
  EXPECT_EQ(slots.Replace(a4, {0, 0, 1}).status().code(), StatusCode::kResourceExhausted);
  EXPECT_FALSE(slots.draining());
  EXPECT_EQ(slots.adapters()[2], a3.get());
  EXPECT_EQ(slots.Select(Named("a"))->scales, (std::vector<float>{0.0f, 0.0f, 1.0f}));
  // Given at creation: stays. Not loaded: loaded.
  EXPECT_EQ(slots.Replace(Adapter("fixed"), {}).status().code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(slots.Unload("b").ok());
  slots.FreeDrained({0, 0, 0});
  EXPECT_EQ(*slots.Replace(Adapter("c"), {0, 0, 0}), 1);
}

TEST(LoraChecks, ScalesAndNamesAndOptions) {
  RequestParams p;
  p.lora_adapter = "a";
  EXPECT_EQ(CheckLoraScales(p, 0).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(CheckLoraScales(p, 2).ok());
  p.lora_scales = {1.0f, 0.0f};
  EXPECT_EQ(CheckLoraScales(p, 2).code(), StatusCode::kInvalidArgument);  // not both
  p.lora_adapter.clear();
  EXPECT_TRUE(CheckLoraScales(p, 2).ok());
  EXPECT_EQ(CheckLoraScales(p, 3).code(), StatusCode::kInvalidArgument);
  EngineOptions o;
  o.max_runtime_loras = kMaxRuntimeLoras + 1;
  EXPECT_FALSE(CheckLoraAdapters(o, false, false).ok());
  o.max_runtime_loras = 2;
  EXPECT_TRUE(CheckLoraAdapters(o, false, false).ok());
  EXPECT_FALSE(CheckLoraAdapters(o, false, /*split=*/true).ok());
}

}  // namespace
}  // namespace infera
