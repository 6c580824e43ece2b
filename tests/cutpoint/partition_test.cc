#include "mitra/cutpoint/partition.h"

#include <gtest/gtest.h>

#include "mitra/cutpoint/model.h"

#include <numeric>

namespace mitra::cutpoint {
namespace {

std::vector<int> Counts(const Result<Partition>& p) {
  EXPECT_TRUE(p.ok()) << p.status().message();
  return p.ok() ? p->counts : std::vector<int>{};
}

// A segment's name becomes its checkpoint file's ("seg-<name>.pt") and a field of the manifest:
// a name that would be a path or two fields is refused before anything is built.
TEST(ModelSpec, SegmentNamesThatWouldNotBeOneFileNameAreRefused) {
  for (const char* name : {"a/b", "a b", "a.b", "", "tab\tname"}) {
    ModelSpec spec;
    spec.AddSegment(name, [] { return std::shared_ptr<Segment>(); });  // never built
    spec.loss = [](const Activations& out, const Activations&) { return out.begin()->second; };
    const Status s = spec.Validate();
    ASSERT_FALSE(s.ok()) << name;
    EXPECT_NE(s.message().find("contain no '.', '/' or whitespace"), std::string::npos)
        << s.message();
  }
}

TEST(Partition, UniformGivesEarlierStagesTheExtraSegments) {
  EXPECT_EQ(Counts(MakePartition("uniform", 10, 4)), (std::vector<int>{3, 3, 2, 2}));
  EXPECT_EQ(Counts(MakePartition("uniform", 8, 8)), std::vector<int>(8, 1));
  EXPECT_EQ(Counts(MakePartition("uniform", 5, 1)), std::vector<int>{5});
}

TEST(Partition, ExplicitAcceptsNonUniformCounts) {
  auto p = MakePartition("1,4,4,3", 12, 4);
  EXPECT_EQ(Counts(p), (std::vector<int>{1, 4, 4, 3}));
  EXPECT_EQ(p->FirstSegment(2), 5);
  EXPECT_EQ(p->EndSegment(2), 9);
  EXPECT_EQ(p->StageOf(0), 0);
  EXPECT_EQ(p->StageOf(5), 2);
  EXPECT_EQ(p->StageOf(11), 3);
  EXPECT_EQ(p->ToString(), "1,4,4,3");
}

TEST(Partition, ParamsBalancesTheLargestStage) {
  // A heavy first and last segment (embeddings) around light blocks.
  std::vector<int64_t> params{100, 10, 10, 10, 10, 10, 10, 100};
  auto p = MakePartition("params", 8, 2, params);
  EXPECT_EQ(Counts(p), (std::vector<int>{4, 4}));
  auto three = Counts(MakePartition("params", 8, 3, params));
  ASSERT_EQ(three.size(), 3u);
  EXPECT_EQ(three.front(), 1);
  EXPECT_EQ(three.back(), 1);
  EXPECT_EQ(std::accumulate(three.begin(), three.end(), 0), 8);
}

TEST(Partition, ParamsNeverLeavesAStageEmpty) {
  std::vector<int64_t> params{1000, 1, 1, 1};
  auto counts = Counts(MakePartition("params", 4, 4, params));
  EXPECT_EQ(counts, std::vector<int>(4, 1));
}

TEST(Partition, RejectsMoreStagesThanSegments) {
  auto p = MakePartition("uniform", 4, 5);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), Status::Code::kInvalidArgument);
  EXPECT_NE(p.status().message().find("at most 4 stages"), std::string::npos)
      << p.status().message();
}

TEST(Partition, RejectsExplicitCountsThatDoNotAddUp) {
  auto p = MakePartition("1,4,4,2", 12, 4);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("covers 11 segments but the model has 12"),
            std::string::npos)
      << p.status().message();
}

TEST(Partition, RejectsWrongNumberOfStagesEmptyStagesAndGarbage) {
  EXPECT_NE(MakePartition("6,6", 12, 4).status().message().find("one count per stage"),
            std::string::npos);
  EXPECT_NE(MakePartition("0,6,6", 12, 3).status().message().find("empty"), std::string::npos);
  EXPECT_NE(MakePartition("3,x", 6, 2).status().message().find("'x' is not a segment count"),
            std::string::npos);
  EXPECT_NE(MakePartition("balanced", 6, 2).status().message().find("unknown partition method"),
            std::string::npos);
}

TEST(PartitionMethod, NamesReadBackAndExplicitCountsKeepTheirOrder) {
  for (const std::string text : {"uniform", "params", "1,4,4,3", "7"}) {
    Result<PartitionMethod> method = ParsePartitionMethod(text);
    ASSERT_TRUE(method.ok()) << method.status().message();
    EXPECT_EQ(PartitionMethodName(*method), text);
  }
  EXPECT_EQ(ParsePartitionMethod("1,4,4,3")->counts, (std::vector<int>{1, 4, 4, 3}));
  EXPECT_EQ(ParsePartitionMethod("params")->kind, PartitionMethod::Kind::kParams);
  EXPECT_TRUE(*ParsePartitionMethod("uniform") == PartitionMethod{});
  EXPECT_EQ(ParsePartitionMethod("balanced").status().message(),
            "unknown partition method 'balanced' (expected uniform, params, counts like 1,4,4,3, "
            "or counts per pipeline like 1,3/3,1)");
  EXPECT_EQ(ParsePartitionMethod("1,,2").status().message(),
            "partition '1,,2': '' is not a segment count (expected e.g. 1,4,4,3)");
  // What fits the job is MakePartition's to say: the counts are checked against it there.
  EXPECT_TRUE(ParsePartitionMethod("6,6").ok());
  EXPECT_NE(MakePartition(*ParsePartitionMethod("6,6"), 12, 4).status().message().find(
                "one count per stage"),
            std::string::npos);
}

// "1,3/3,1": each pipeline's counts; each replica takes its own, and a job with another number
// of replicas is told how many lists to give.
TEST(PartitionMethod, EachPipelineTakesItsOwnCounts) {
  Result<PartitionMethod> method = ParsePartitionMethod("1,3/3,1");
  ASSERT_TRUE(method.ok()) << method.status().message();
  EXPECT_EQ(method->kind, PartitionMethod::Kind::kPerPipeline);
  EXPECT_EQ(PartitionMethodName(*method), "1,3/3,1");
  EXPECT_EQ(PipelineMethod(*method, 1, 2)->counts, (std::vector<int>{3, 1}));
  EXPECT_EQ(PipelineMethod(*method, 0, 2)->kind, PartitionMethod::Kind::kExplicit);
  EXPECT_EQ(PipelineMethod(*method, 0, 3).status().message(),
            "partition '1,3/3,1' gives 2 pipelines' counts and the job has 3 data-parallel "
            "replicas: give one list of counts per replica, '/' between them");
  EXPECT_TRUE(*PipelineMethod(PartitionMethod{}, 2, 3) == PartitionMethod{});
  EXPECT_EQ(ParsePartitionMethod("1,3/").status().message(),
            "partition '1,3/': '' is not a segment count (expected e.g. 1,4,4,3)");
  EXPECT_NE(MakePartition(*method, 4, 2).status().message().find("PipelineMethod"),
            std::string::npos);
}

}  // namespace
}  // namespace mitra::cutpoint
