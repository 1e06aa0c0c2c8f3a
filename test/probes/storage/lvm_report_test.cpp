// The lvm JSON parser, attr/health decoding and the command-line splitter, on real captures and
// on the hand-made fixtures of test/fixtures/lvm (both report forms).
#include "lvm_report.h"

#include <gtest/gtest.h>

#include "storage_fakes.h"

namespace nodegate {
namespace {

using testing::readFixture;

LvmReport mustParse(const std::string& fixture) {
  auto text = readFixture(fixture);
  EXPECT_FALSE(text.empty()) << "fixture " << fixture << " missing";
  auto r = parseLvmReport(text);
  EXPECT_TRUE(r.ok()) << fixture << ": " << (r.ok() ? "" : r.error().message);
  return r.ok() ? std::move(r).value() : LvmReport{};
}

TEST(ParseLvmReport, RealThinPoolCapture) {
  auto rep = mustParse("real/lvm-fullreport-thinpool-bytes-numeric.json");
  EXPECT_EQ(rep.format, "json");
  ASSERT_EQ(rep.vgs.size(), 1u);
  EXPECT_EQ(rep.vgs[0].name, "testvg");
  EXPECT_EQ(rep.vgs[0].size, 2092957696u);
  EXPECT_FALSE(rep.vgs[0].partial);
  const LvmLv* pool = rep.findLv("testvg", "testpool");
  ASSERT_NE(pool, nullptr);
  EXPECT_TRUE(pool->attr.isThinPool());
  EXPECT_TRUE(pool->attr.active());
  EXPECT_EQ(pool->when_full, "queue");
  ASSERT_TRUE(pool->metadata_percent.has_value());
  EXPECT_DOUBLE_EQ(*pool->metadata_percent, 10.94);
  EXPECT_DOUBLE_EQ(pool->data_percent.value_or(-1), 0.0);
  const LvmLv* thin = rep.findLv("testvg", "test_thin");
  ASSERT_NE(thin, nullptr);
  EXPECT_TRUE(thin->attr.isThinVolume());
  EXPECT_EQ(thin->pool_lv, "testpool");
  EXPECT_TRUE(rep.log.empty());  // the capture ends with "log": []
  ASSERT_NE(rep.findLv("testvg", "[lvol0_pmspare]"), nullptr);
  EXPECT_TRUE(rep.findLv("testvg", "[lvol0_pmspare]")->hidden());
}

TEST(ParseLvmReport, RealPartialVgCapture) {
  auto rep = mustParse("real/lvm-fullreport-partial-vg-missing-pv.json");
  ASSERT_EQ(rep.vgs.size(), 1u);
  EXPECT_TRUE(rep.vgs[0].partial);
  EXPECT_EQ(rep.vgs[0].missing_pv_count, 1u);
  int missing = 0;
  for (const auto& pv : rep.pvs) missing += pv.missing;
  EXPECT_EQ(missing, 1);
  const LvmLv* m = rep.findLv("vgaaa", "mirrored");
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->health, LvHealth::Partial);
  EXPECT_EQ(m->attr.health, 'p');
  // Inactive and writable: lvm says "unknown", never read-only.
  EXPECT_EQ(m->permissions, "unknown");
  EXPECT_FALSE(m->attr.readOnly());
}

TEST(ParseLvmReport, RealXXCapture) {
  auto rep = mustParse("real/lvm-fullreport-lv-state-unknown-XX.json");
  ASSERT_FALSE(rep.lvs.empty());
  for (const auto& lv : rep.lvs) EXPECT_TRUE(lv.attr.stateUnknown()) << lv.name;
}

TEST(ParseLvmReport, RealCacheAndPrunedCaptures) {
  auto cache = mustParse("real/lvm-fullreport-cache-lv-data-percent.json");
  const LvmLv* cached = cache.findLv("vgdata", "cached");
  ASSERT_NE(cached, nullptr);
  EXPECT_EQ(cached->attr.type, 'C');
  EXPECT_DOUBLE_EQ(cached->data_percent.value_or(-1), 11.06);
  EXPECT_FALSE(cached->attr.isThinPool());  // a cache's data_percent is no thin-pool pressure
  // The contributor pruned the vg/pv objects to {}: no VG, yet the LVs are still read.
  auto pruned = mustParse("real/lvm-fullreport-snapshot-ancestry-pruned.json");
  EXPECT_TRUE(pruned.vgs.empty());
  EXPECT_EQ(pruned.lvs.size(), 6u);
}

TEST(ParseLvmReport, RealHumanUnitsWithInterleavedWarnings) {
  auto rep = mustParse("real/lvm-fullreport-default-units-with-warnings.txt");
  ASSERT_EQ(rep.vgs.size(), 1u);
  EXPECT_EQ(rep.vgs[0].name, "vgfo");
  // "1.99g" and "<1.47g": binary units, approximate by nature.
  ASSERT_TRUE(rep.vgs[0].size.has_value());
  EXPECT_NEAR(static_cast<double>(*rep.vgs[0].size), 1.99 * (1 << 30), 1 << 20);
  EXPECT_NEAR(static_cast<double>(rep.vgs[0].free.value_or(0)), 1.47 * (1 << 30), 1 << 20);
  ASSERT_EQ(rep.warnings.size(), 2u);
  EXPECT_NE(rep.warnings[1].find("old PV header"), std::string::npos);
  for (const auto& lv : rep.lvs) EXPECT_FALSE(lv.attr.readOnly()) << lv.name;
}

// Every scenario parses to the same facts from its json and its json_std form.
TEST(ParseLvmReport, BothFormsAgree) {
  for (const char* name :
       {"healthy", "thinpool-85", "thinpool-100-out-of-data", "metadata-nearly-full",
        "metadata-read-only", "thinpool-failed", "partial-vg-missing-pv", "xx-states", "snapshots",
        "snapshot-invalid", "inactive-lv", "read-only-lv", "no-vgs"}) {
    SCOPED_TRACE(name);
    auto a = mustParse(std::string(name) + ".json");
    auto b = mustParse(std::string(name) + ".std.json");
    EXPECT_EQ(a.format, "json");
    if (std::string(name) != "no-vgs") {
      EXPECT_EQ(b.format, "json_std");
    }
    ASSERT_EQ(a.vgs.size(), b.vgs.size());
    for (std::size_t i = 0; i < a.vgs.size(); ++i) {
      EXPECT_EQ(a.vgs[i].name, b.vgs[i].name);
      EXPECT_EQ(a.vgs[i].size, b.vgs[i].size);
      EXPECT_EQ(a.vgs[i].free, b.vgs[i].free);
      EXPECT_EQ(a.vgs[i].partial, b.vgs[i].partial);
      EXPECT_EQ(a.vgs[i].missing_pv_count, b.vgs[i].missing_pv_count);
    }
    ASSERT_EQ(a.pvs.size(), b.pvs.size());
    for (std::size_t i = 0; i < a.pvs.size(); ++i) EXPECT_EQ(a.pvs[i].missing, b.pvs[i].missing);
    ASSERT_EQ(a.lvs.size(), b.lvs.size());
    for (std::size_t i = 0; i < a.lvs.size(); ++i) {
      EXPECT_EQ(a.lvs[i].full_name, b.lvs[i].full_name);
      EXPECT_EQ(a.lvs[i].attr_text, b.lvs[i].attr_text);
      EXPECT_EQ(a.lvs[i].health, b.lvs[i].health);
      EXPECT_EQ(a.lvs[i].size, b.lvs[i].size);
      EXPECT_EQ(a.lvs[i].data_percent, b.lvs[i].data_percent);
      EXPECT_EQ(a.lvs[i].metadata_percent, b.lvs[i].metadata_percent);
    }
  }
}

TEST(ParseLvmReport, LogSectionAndStrayWarnings) {
  auto rep = mustParse("log-and-warnings.std.txt");
  EXPECT_EQ(rep.format, "json_std");
  ASSERT_EQ(rep.log.size(), 1u);
  EXPECT_EQ(rep.log[0].type, "status");
  EXPECT_EQ(rep.log[0].ret_code, 1);
  ASSERT_EQ(rep.warnings.size(), 2u);
  EXPECT_NE(rep.warnings[0].find("size of 0 sectors"), std::string::npos);
  EXPECT_NE(rep.findLv("vmdata", "pool"), nullptr);
}

TEST(ParseLvmReport, GarbageIsAClearError) {
  struct Case {
    std::string text, expect;
  };
  std::vector<Case> cases = {
      {"", "no JSON object"},
      {readFixture("garbage.txt"), "no JSON object"},
      {readFixture("truncated.json"), "failed to parse lvm report"},
      {readFixture("wrong-shape.json"), "no \"report\" list"},
      {"[1,2,3]", "no JSON object"},
      {"{\"report\": [1]}", "not an object"},
      {"{\"report\": [{\"lv\": {}}]}", "\"lv\" is not a list"},
      {"{\"report\": [{\"lv\": [3]}]}", "non-object"},
      {"{\"report\": []} trailing words", "unexpected text after"},
      {"Volume group not found\n{\"report\": []}", "unexpected text before"},
      {std::string(100, '[') + "{}" + std::string(100, ']'), "unexpected text before"},
      {"{\"a\":" + std::string(200, '[') + std::string(200, ']') + "}", "nested deeper"},
  };
  for (const auto& c : cases) {
    auto r = parseLvmReport(c.text);
    ASSERT_FALSE(r.ok()) << c.text.substr(0, 80);
    EXPECT_EQ(r.error().message.rfind("failed to parse lvm report", 0), 0u) << r.error().message;
    EXPECT_NE(r.error().message.find(c.expect), std::string::npos) << r.error().message;
  }
}

TEST(ParseLvmReport, EmptyReportIsValid) {
  auto r = parseLvmReport("  {\n      \"report\": [\n      ]\n  }\n");
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->vgs.empty());
}

TEST(LvAttr, DecodesAllTenCharacters) {
  auto a = parseLvAttr("twi-aotzD-");
  ASSERT_TRUE(a.valid);
  EXPECT_EQ(a.type, 't');
  EXPECT_EQ(a.permission, 'w');
  EXPECT_EQ(a.allocation, 'i');
  EXPECT_FALSE(a.fixed_minor);
  EXPECT_EQ(a.state, 'a');
  EXPECT_EQ(a.open, 'o');
  EXPECT_EQ(a.target, 't');
  EXPECT_TRUE(a.zero);
  EXPECT_EQ(a.health, 'D');
  EXPECT_FALSE(a.skip_activation);
  EXPECT_TRUE(a.isThinPool());
  EXPECT_EQ(describeLvAttr(a),
            "thin pool, writeable, active, open, thin target, zeroes new blocks, out of data "
            "space");

  auto b = parseLvAttr("VrCma-tzMk");
  EXPECT_TRUE(b.isThinVolume());
  EXPECT_TRUE(b.readOnly());
  EXPECT_TRUE(b.fixed_minor);
  EXPECT_TRUE(b.skip_activation);
  EXPECT_EQ(describeLvAttr(b),
            "thin volume, read-only, allocation locked, fixed minor, active, thin target, "
            "zeroes new blocks, metadata read-only, skip activation");

  EXPECT_TRUE(parseLvAttr("Vwi-aotz--").active());
  EXPECT_TRUE(parseLvAttr("-wi-XX----").stateUnknown());
  EXPECT_TRUE(parseLvAttr("-Ri-ao----").readOnly());
  // Inactive: no state letter, and permission w is not read-only.
  auto inactive = parseLvAttr("-wi-------");
  EXPECT_FALSE(inactive.active());
  EXPECT_FALSE(inactive.readOnly());
  EXPECT_NE(describeLvAttr(inactive).find("inactive"), std::string::npos);
  EXPECT_TRUE(parseLvAttr("swi-I-s---").isSnapshot());
  EXPECT_NE(describeLvAttr(parseLvAttr("swi-I-s---")).find("invalid snapshot"), std::string::npos);
  EXPECT_FALSE(parseLvAttr("twi-aotz-").valid);
  EXPECT_FALSE(parseLvAttr("").valid);
  EXPECT_EQ(describeLvAttr(parseLvAttr("xx")), "unparsable lv_attr");
}

TEST(LvHealth, EveryValueRoundTrips) {
  for (auto h : {LvHealth::Partial, LvHealth::RefreshNeeded, LvHealth::MismatchesExist,
                 LvHealth::WriteMostly, LvHealth::Failed, LvHealth::OutOfData,
                 LvHealth::MetadataReadOnly, LvHealth::Error, LvHealth::Unknown})
    EXPECT_EQ(parseLvHealth(toString(h)), h) << toString(h);
  EXPECT_EQ(parseLvHealth(""), LvHealth::Ok);
  EXPECT_EQ(parseLvHealth("something new"), LvHealth::Other);
  EXPECT_FALSE(isProblem(LvHealth::Ok));
  EXPECT_FALSE(isProblem(LvHealth::WriteMostly));
  EXPECT_FALSE(isProblem(LvHealth::Unknown));
  for (auto h : {LvHealth::Partial, LvHealth::RefreshNeeded, LvHealth::Failed, LvHealth::OutOfData,
                 LvHealth::MetadataReadOnly, LvHealth::Error, LvHealth::Other})
    EXPECT_TRUE(isProblem(h)) << toString(h);
}

TEST(SplitCommandLine, ShellLikeWords) {
  auto w = splitCommandLine("nsenter -t 1 -m -- lvm");
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(*w, (std::vector<std::string>{"nsenter", "-t", "1", "-m", "--", "lvm"}));
  w = splitCommandLine("  '/opt/my tools/lvm'   \"a \\\"b\\\" c\" d\\ e 'x'y\"z\" ");
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(*w, (std::vector<std::string>{"/opt/my tools/lvm", "a \"b\" c", "d e", "xyz"}));
  w = splitCommandLine("lvm ''");
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(*w, (std::vector<std::string>{"lvm", ""}));
  // No shell: $, ; and | are plain characters.
  w = splitCommandLine("lvm;rm $HOME|x");
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(*w, (std::vector<std::string>{"lvm;rm", "$HOME|x"}));
  EXPECT_TRUE(splitCommandLine("").ok());
  EXPECT_TRUE(splitCommandLine("")->empty());
  for (const char* bad : {"lvm 'open", "lvm \"open", "lvm \\"})
    EXPECT_FALSE(splitCommandLine(bad).ok()) << bad;
}

TEST(LvmFullreportArgs, OneRunWithEveryNeededField) {
  auto argv = lvmFullreportArgs({"nsenter", "-t", "1", "-m", "--", "lvm"});
  ASSERT_GT(argv.size(), 10u);
  EXPECT_EQ(argv[5], "lvm");
  EXPECT_EQ(argv[6], "fullreport");
  std::string joined;
  for (const auto& a : argv) joined += a + " ";
  EXPECT_NE(joined.find("--reportformat json --units b --nosuffix"), std::string::npos);
  for (const char* field : {"vg_missing_pv_count", "pv_missing", "lv_attr", "lv_health_status",
                            "data_percent", "metadata_percent", "lv_when_full", "pool_lv"})
    EXPECT_NE(joined.find(field), std::string::npos) << field;
}

}  // namespace
}  // namespace nodegate
