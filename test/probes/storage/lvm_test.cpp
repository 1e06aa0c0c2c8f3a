// The lvm probe's verdicts on every fixture (both forms), its treatment of lvm runs that fail,
// and the report source that shares one run between the two storage probes.
#include "lvm.h"

#include <gtest/gtest.h>

#include <csignal>

#include "storage_fakes.h"

namespace nodegate {
namespace {

using testing::FakeExec;
using testing::readFixture;

LvmFetch fetchOf(const std::string& fixture) {
  LvmFetch f;
  f.command = "lvm";
  auto rep = parseLvmReport(readFixture(fixture));
  EXPECT_TRUE(rep.ok()) << fixture;
  if (rep) f.report = std::move(rep).value();
  return f;
}

const MetricSample* metric(const CheckResult& r, const std::string& name,
                           const std::map<std::string, std::string>& labels = {}) {
  for (const auto& m : r.metrics) {
    if (m.name != name) continue;
    bool match = true;
    for (const auto& [k, v] : labels) match &= m.labels.count(k) && m.labels.at(k) == v;
    if (match) return &m;
  }
  return nullptr;
}

bool contains(const std::string& hay, const std::string& needle) {
  return hay.find(needle) != std::string::npos;
}

struct Expect {
  const char* fixture;
  Status status;
  const char* reason;
  const char* in_message;
};

class LvmVerdicts : public ::testing::TestWithParam<Expect> {};

TEST_P(LvmVerdicts, BothForms) {
  const Expect& e = GetParam();
  for (const char* suffix : {".json", ".std.json"}) {
    SCOPED_TRACE(std::string(e.fixture) + suffix);
    auto r = evaluateLvm(fetchOf(std::string(e.fixture) + suffix), LvmPolicy{});
    EXPECT_EQ(r.check, "lvm");
    EXPECT_EQ(toString(r.status), toString(e.status)) << r.message;
    EXPECT_EQ(r.reason, e.reason) << r.message;
    EXPECT_TRUE(contains(r.message, e.in_message)) << r.message;
    if (r.status != Status::Pass) {
      EXPECT_FALSE(r.hint.empty());
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Fixtures, LvmVerdicts,
    ::testing::Values(
        Expect{"healthy", Status::Pass, "VolumeGroupsHealthy", "1 volume groups complete"},
        Expect{"thinpool-85", Status::Warn, "ThinPoolDataPressure",
               "thin pool vmdata/pool data 85.00 % >= 80.00 %; writes queue when it is full"},
        Expect{"thinpool-100-out-of-data", Status::Fail, "ThinPoolDataPressure",
               "thin pool vmdata/pool is out of data space"},
        Expect{"metadata-nearly-full", Status::Fail, "ThinPoolMetadataPressure",
               "metadata 88.50 % >= 85.00 %"},
        Expect{"metadata-read-only", Status::Fail, "ThinPoolMetadataPressure",
               "metadata is read-only"},
        Expect{"thinpool-failed", Status::Fail, "LogicalVolumeUnhealthy",
               "LV vmdata/pool health: failed"},
        Expect{"partial-vg-missing-pv", Status::Fail, "VolumeGroupDegraded",
               "volume group vmdata is partial: 1 of 2 PVs missing (uuid uuid-pv1)"},
        Expect{"xx-states", Status::Unknown, "LvmStateUnknown", "3 LVs report unknown state"},
        Expect{"snapshots", Status::Pass, "VolumeGroupsHealthy", "complete"},
        Expect{"snapshot-invalid", Status::Fail, "LogicalVolumeUnhealthy",
               "LV vmdata/base-snap is an invalid snapshot"},
        Expect{"inactive-lv", Status::Pass, "VolumeGroupsHealthy", "complete"},
        Expect{"read-only-lv", Status::Pass, "VolumeGroupsHealthy", "complete"},
        Expect{"no-vgs", Status::Pass, "NoVolumeGroups", "no volume groups"}));

TEST(LvmVerdict, RealCaptures) {
  struct Case {
    const char* fixture;
    Status status;
    const char* reason;
  };
  for (const Case& c : {
           Case{"real/lvm-fullreport-thinpool-bytes-numeric.json", Status::Pass,
                "VolumeGroupsHealthy"},
           Case{"real/lvm-fullreport-partial-vg-missing-pv.json", Status::Fail,
                "VolumeGroupDegraded"},
           Case{"real/lvm-fullreport-lv-state-unknown-XX.json", Status::Unknown, "LvmStateUnknown"},
           Case{"real/lvm-fullreport-cache-lv-data-percent.json", Status::Pass,
                "VolumeGroupsHealthy"},
           Case{"real/lvm-fullreport-default-units-with-warnings.txt", Status::Pass,
                "VolumeGroupsHealthy"},
       }) {
    SCOPED_TRACE(c.fixture);
    auto r = evaluateLvm(fetchOf(c.fixture), LvmPolicy{});
    EXPECT_EQ(toString(r.status), toString(c.status)) << r.message;
    EXPECT_EQ(r.reason, c.reason);
  }
  // The partial capture also names its raid LV, and the XX one points at nsenter.
  auto partial = evaluateLvm(fetchOf("real/lvm-fullreport-partial-vg-missing-pv.json"), {});
  EXPECT_TRUE(contains(partial.message, "LV vgaaa/mirrored health: partial")) << partial.message;
  auto xx = evaluateLvm(fetchOf("real/lvm-fullreport-lv-state-unknown-XX.json"), {});
  EXPECT_TRUE(contains(xx.hint, "nsenter -t 1 -m -- lvm")) << xx.hint;
  // queue is noted in the thin pool's evidence.
  auto tp = evaluateLvm(fetchOf("real/lvm-fullreport-thinpool-bytes-numeric.json"), {});
  bool noted = false;
  for (const auto& e : tp.evidence)
    noted |= e.source == "thin pool testvg/testpool" && contains(e.observed, "lv_when_full=queue");
  EXPECT_TRUE(noted);
}

TEST(LvmVerdict, MetricsOfAHealthyNode) {
  auto r = evaluateLvm(fetchOf("healthy.std.json"), LvmPolicy{});
  const auto* size = metric(r, "nodegate_lvm_vg_size_bytes", {{"vg", "vmdata"}});
  ASSERT_NE(size, nullptr);
  EXPECT_DOUBLE_EQ(size->value, 32.0 * (1u << 30));
  ASSERT_NE(metric(r, "nodegate_lvm_vg_free_bytes", {{"vg", "vmdata"}}), nullptr);
  EXPECT_DOUBLE_EQ(metric(r, "nodegate_lvm_vg_free_bytes", {{"vg", "vmdata"}})->value,
                   4.0 * (1u << 30));
  EXPECT_DOUBLE_EQ(metric(r, "nodegate_lvm_pv_missing", {{"vg", "vmdata"}})->value, 0);
  const auto* data =
      metric(r, "nodegate_lvm_thin_pool_data_ratio", {{"vg", "vmdata"}, {"lv", "pool"}});
  ASSERT_NE(data, nullptr);
  EXPECT_DOUBLE_EQ(data->value, 0.40);
  EXPECT_DOUBLE_EQ(
      metric(r, "nodegate_lvm_thin_pool_metadata_ratio", {{"vg", "vmdata"}, {"lv", "pool"}})->value,
      0.20);
  // Per-LV health for public LVs only: lvm's hidden sub-volumes would triple the series.
  EXPECT_NE(metric(r, "nodegate_lvm_lv_health", {{"lv", "pvc-aaa"}, {"status", "ok"}}), nullptr);
  EXPECT_EQ(metric(r, "nodegate_lvm_lv_health", {{"lv", "[pool_tdata]"}}), nullptr);
}

TEST(LvmVerdict, DegradedAndFullMetrics) {
  auto partial = evaluateLvm(fetchOf("partial-vg-missing-pv.json"), {});
  EXPECT_DOUBLE_EQ(metric(partial, "nodegate_lvm_pv_missing", {{"vg", "vmdata"}})->value, 1);
  EXPECT_NE(metric(partial, "nodegate_lvm_lv_health", {{"lv", "pvc-aaa"}, {"status", "partial"}}),
            nullptr);
  auto full = evaluateLvm(fetchOf("thinpool-100-out-of-data.json"), {});
  EXPECT_DOUBLE_EQ(metric(full, "nodegate_lvm_thin_pool_data_ratio", {{"lv", "pool"}})->value, 1.0);
  EXPECT_NE(metric(full, "nodegate_lvm_lv_health", {{"lv", "pool"}, {"status", "out_of_data"}}),
            nullptr);
}

TEST(LvmVerdict, ThresholdsAreConfigurable) {
  Config cfg;
  cfg.set("lvm", "data_warn_percent", 86);
  cfg.set("lvm", "metadata_fail_percent", 90);
  EXPECT_EQ(evaluateLvm(fetchOf("thinpool-85.json"), lvmPolicy(cfg)).status, Status::Pass);
  auto meta = evaluateLvm(fetchOf("metadata-nearly-full.json"), lvmPolicy(cfg));
  EXPECT_EQ(meta.status, Status::Warn);
  EXPECT_EQ(meta.reason, "ThinPoolMetadataPressure");
  cfg.set("lvm", "data_fail_percent", 40);
  auto fail = evaluateLvm(fetchOf("healthy.json"), lvmPolicy(cfg));
  EXPECT_EQ(fail.status, Status::Fail);
  EXPECT_EQ(fail.reason, "ThinPoolDataPressure");
}

TEST(LvmVerdict, ManagedVolumeGroupMustExist) {
  Config cfg;
  cfg.set("lvm", "volume_group", "vmdata");
  EXPECT_EQ(evaluateLvm(fetchOf("healthy.json"), lvmPolicy(cfg)).status, Status::Pass);
  auto none = evaluateLvm(fetchOf("no-vgs.json"), lvmPolicy(cfg));
  EXPECT_EQ(none.status, Status::Fail);
  EXPECT_EQ(none.reason, "VolumeGroupMissing");
  cfg.set("lvm", "volume_group", "other");
  EXPECT_EQ(evaluateLvm(fetchOf("healthy.json"), lvmPolicy(cfg)).reason, "VolumeGroupMissing");
}

TEST(LvmVerdict, SeriesAreBounded) {
  Config cfg;
  cfg.set("lvm", "max_lv_series", 1);
  auto r = evaluateLvm(fetchOf("snapshots.json"), lvmPolicy(cfg));
  int n = 0;
  for (const auto& m : r.metrics) n += m.name == "nodegate_lvm_lv_health";
  EXPECT_EQ(n, 1);
  bool noted = false;
  for (const auto& e : r.evidence) noted |= e.source == "nodegate_lvm_lv_health";
  EXPECT_TRUE(noted);
}

TEST(LvmVerdict, FailedRuns) {
  LvmFetch f;
  f.command = "lvm";
  f.failure = LvmRunFailure::NotFound;
  f.error = "failed to run lvm: command not found";
  auto r = evaluateLvm(f, {});
  EXPECT_EQ(r.status, Status::Pass);  // no lvm at all: nothing local to be unhealthy
  EXPECT_EQ(r.reason, "NoLocalLvm");
  LvmPolicy managed;
  managed.volume_group = "vmdata";
  r = evaluateLvm(f, managed);
  EXPECT_EQ(r.status, Status::Unknown);
  EXPECT_EQ(r.reason, "LvmNotFound");
  EXPECT_TRUE(contains(r.hint, "nsenter"));

  for (auto [failure, reason] : {std::pair{LvmRunFailure::TimedOut, "LvmTimeout"},
                                 std::pair{LvmRunFailure::Failed, "LvmCommandFailed"},
                                 std::pair{LvmRunFailure::Unparsable, "LvmReportUnparsable"}}) {
    f.failure = failure;
    f.error = "failed to run lvm: something";
    r = evaluateLvm(f, {});
    EXPECT_EQ(r.status, Status::Unknown) << reason;
    EXPECT_EQ(r.reason, reason);
    EXPECT_EQ(r.message, f.error);
    EXPECT_FALSE(r.hint.empty());
  }
}

LvmFetch oneLv(const std::string& attr, const std::string& health) {
  LvmFetch f;
  f.command = "lvm";
  f.report.vgs.push_back(LvmVg{"vg0", "u", "wz--n-", 1u << 30, 0u, false, 0, 1});
  LvmLv lv;
  lv.vg = "vg0";
  lv.name = "lv0";
  lv.full_name = "vg0/lv0";
  lv.attr_text = attr;
  lv.attr = parseLvAttr(attr);
  lv.health_text = health;
  lv.health = parseLvHealth(health);
  f.report.lvs.push_back(lv);
  return f;
}

// lv_health_status wins; when a report lacks it, lv_attr's ninth character says the same.
TEST(LvmVerdict, HealthFromStatusOrAttr) {
  struct Case {
    const char* attr;
    const char* health;
    Status status;
    const char* reason;
    const char* in_message;
  };
  for (const Case& c : {
           Case{"rwi-aor-m-", "", Status::Warn, "LogicalVolumeMismatches", "raid mismatches"},
           Case{"rwi-aor---", "mismatches exist", Status::Warn, "LogicalVolumeMismatches", ""},
           Case{"rwi-aor-r-", "", Status::Fail, "LogicalVolumeUnhealthy", "health: refresh needed"},
           Case{"rwi-aor-w-", "writemostly", Status::Pass, "VolumeGroupsHealthy", ""},
           Case{"Vwi-aotzF-", "", Status::Fail, "LogicalVolumeUnhealthy", "vg0/lv0 health: failed"},
           Case{"Cwi-aoC-E-", "error", Status::Fail, "LogicalVolumeUnhealthy", "health: error"},
           Case{"-wi-ao--p-", "", Status::Fail, "LogicalVolumeUnhealthy", "health: partial"},
           Case{"-wi-ao----", "brand new state", Status::Fail, "LogicalVolumeUnhealthy",
                "health: brand new state"},
           Case{"twi-aotzD-", "", Status::Fail, "ThinPoolDataPressure", "out of data space"},
           Case{"twi-aotzM-", "", Status::Fail, "ThinPoolMetadataPressure", "read-only"},
           Case{"rwi-aor-X-", "", Status::Unknown, "LvmStateUnknown", "1 LVs"},
           Case{"-wi-d-----", "", Status::Warn, "LogicalVolumeStateAbnormal", "without tables"},
           Case{"twi-c-tz--", "", Status::Fail, "LogicalVolumeUnhealthy", "check needed"},
           Case{"Owi-m-s---", "", Status::Fail, "LogicalVolumeUnhealthy", "merge failed"},
       }) {
    SCOPED_TRACE(std::string(c.attr) + " " + c.health);
    auto r = evaluateLvm(oneLv(c.attr, c.health), {});
    EXPECT_EQ(toString(r.status), toString(c.status)) << r.message;
    EXPECT_EQ(r.reason, c.reason) << r.message;
    EXPECT_TRUE(contains(r.message, c.in_message)) << r.message;
  }
}

TEST(CombineFindings, WorstLeadsAndOthersFollow) {
  std::vector<StorageFinding> f = {{Status::Warn, "A", "a", "ha"},
                                   {Status::Unknown, "B", "b", "hb"},
                                   {Status::Fail, "C", "c", "hc"},
                                   {Status::Warn, "D", "d", "hd"},
                                   {Status::Warn, "E", "e", "he"}};
  auto r = combineFindings("x", f, "Ok", "fine");
  EXPECT_EQ(r.status, Status::Fail);
  EXPECT_EQ(r.reason, "C");
  EXPECT_EQ(r.hint, "hc");
  EXPECT_EQ(r.message, "c; a; b (+2 more)");
  EXPECT_EQ(combineFindings("x", {}, "Ok", "fine").reason, "Ok");
  // UNKNOWN outranks WARN: "could not tell" must not read as merely degraded.
  EXPECT_EQ(combineFindings("x", {f[0], f[1]}, "Ok", "").status, Status::Unknown);
}

TEST(LvmReportSource, RunsOncePerCycleAndClassifiesFailures) {
  auto exec = std::make_shared<FakeExec>();
  LvmReportSource src(exec);
  Config cfg;
  cfg.set("lvm", "command", "nsenter -t 1 -m -- lvm");
  cfg.set("lvm", "timeout_seconds", 3);
  exec->reply(readFixture("healthy.json"));
  auto a = src.get(cfg, std::chrono::milliseconds(0));
  EXPECT_EQ(a->failure, LvmRunFailure::None);
  EXPECT_EQ(exec->calls, 1);
  EXPECT_EQ(exec->last_argv[0], "nsenter");
  EXPECT_EQ(exec->last_argv[6], "fullreport");
  EXPECT_EQ(exec->last_timeout, std::chrono::milliseconds(3000));
  // local-pv's call within the max age reuses the lvm probe's run.
  auto b = src.get(cfg, std::chrono::seconds(30));
  EXPECT_EQ(exec->calls, 1);
  EXPECT_EQ(a.get(), b.get());
  // A changed command is a different report.
  cfg.set("lvm", "command", "lvm");
  src.get(cfg, std::chrono::seconds(30));
  EXPECT_EQ(exec->calls, 2);

  exec->reply("", 127, "No such file or directory");
  EXPECT_EQ(src.get(cfg, {})->failure, LvmRunFailure::NotFound);
  exec->reply("not json", 0);
  auto bad = src.get(cfg, {});
  EXPECT_EQ(bad->failure, LvmRunFailure::Unparsable);
  EXPECT_TRUE(contains(bad->error, "failed to parse lvm report"));
  exec->reply("", 5, "  Volume group \"x\" not found\n");
  auto failed = src.get(cfg, {});
  EXPECT_EQ(failed->failure, LvmRunFailure::Failed);
  EXPECT_TRUE(contains(failed->error, "exit code 5")) << failed->error;
  EXPECT_TRUE(contains(failed->error, "not found")) << failed->error;
  // Exit 5 with a report (one VG of several unreadable): keep the report, mark the failure.
  exec->reply(readFixture("healthy.json"), 5, "  WARNING: Couldn't find device with uuid x.\n");
  auto partial = src.get(cfg, {});
  EXPECT_EQ(partial->failure, LvmRunFailure::None);
  ASSERT_EQ(partial->report.warnings.size(), 1u);
  EXPECT_TRUE(contains(partial->report.warnings[0], "Couldn't find device"));
  EXPECT_TRUE(contains(partial->run_error, "exit code 5")) << partial->run_error;
  // Killed by a signal after printing: the same, named by the signal.
  exec->reply(readFixture("no-vgs.json"), -1, "");
  exec->next.signal = SIGSEGV;
  auto crashed = src.get(cfg, {});
  EXPECT_EQ(crashed->failure, LvmRunFailure::None);
  EXPECT_EQ(crashed->run_error, "killed by SIGSEGV: no error output");
  exec->reply("", -1, "");
  exec->next.signal = SIGSEGV;
  auto crashed_silent = src.get(cfg, {});
  EXPECT_EQ(crashed_silent->failure, LvmRunFailure::Failed);
  EXPECT_TRUE(contains(crashed_silent->error, "killed by SIGSEGV")) << crashed_silent->error;
  exec->next = ExecResult{};
  exec->next.timed_out = true;
  EXPECT_EQ(src.get(cfg, {})->failure, LvmRunFailure::TimedOut);
  exec->next = ExecResult{};
  exec->next.truncated = true;
  EXPECT_EQ(src.get(cfg, {})->failure, LvmRunFailure::Unparsable);
  cfg.set("lvm", "command", "'unterminated");
  auto split = src.get(cfg, {});
  EXPECT_EQ(split->failure, LvmRunFailure::Failed);
  EXPECT_TRUE(contains(split->error, "unterminated single quote"));
}

// A failed lvm run is never a healthy result, whatever it printed (issue: the real lvm run as a
// non-root user prints an empty, valid report and exits 5; a crash after printing).
TEST(LvmEvaluate, AFailedRunIsNeverHealthy) {
  for (const char* fixture : {"no-vgs.json", "healthy.json", "no-vgs.std.json"}) {
    for (const char* how :
         {"exit code 5: /run/lock/lvm/P_global:aux: open failed: Permission denied",
          "exit code 139: no error output", "killed by SIGSEGV: no error output"}) {
      auto f = fetchOf(fixture);
      f.run_error = how;
      auto r = evaluateLvm(f, LvmPolicy{});
      EXPECT_EQ(r.status, Status::Unknown) << fixture << " " << how;
      EXPECT_EQ(r.reason, "LvmCommandFailed") << fixture << " " << how;
      EXPECT_TRUE(contains(r.message, how)) << r.message;
      EXPECT_FALSE(r.hint.empty());
    }
  }
  // An established fault in what lvm could read still outranks the doubt.
  auto f = fetchOf("partial-vg-missing-pv.json");
  f.run_error = "exit code 5: no error output";
  auto r = evaluateLvm(f, LvmPolicy{});
  EXPECT_EQ(r.status, Status::Fail);
  EXPECT_EQ(r.reason, "VolumeGroupDegraded");
  EXPECT_TRUE(contains(r.message, "lvm failed (exit code 5")) << r.message;
  // A managed VG absent from a failed run's report is not known to be gone.
  auto g = fetchOf("no-vgs.json");
  g.run_error = "exit code 5: no error output";
  LvmPolicy managed;
  managed.volume_group = "vmdata";
  auto m = evaluateLvm(g, managed);
  EXPECT_EQ(m.status, Status::Unknown);
}

// Devices the device cgroup refused hide whatever volume groups they hold.
TEST(LvmEvaluate, RefusedBlockDevicesAreNeverNoVolumeGroups) {
  LvmFetch skipped;
  skipped.command = "lvm";
  skipped.lvm_skipped = true;
  skipped.refused = {"vda", "vdb"};
  skipped.label_scan = "0 block devices read; open refused (EPERM, the device cgroup) for vda vdb";
  auto r = evaluateLvm(skipped, LvmPolicy{});
  EXPECT_EQ(r.status, Status::Unknown);
  EXPECT_EQ(r.reason, "BlockDevicesRefused");
  EXPECT_TRUE(contains(r.message, "2 block devices (vda, vdb) was refused")) << r.message;
  EXPECT_TRUE(contains(r.hint, "device-probe")) << r.hint;

  // lvm ran and found a VG on a readable device: still UNKNOWN, the refused ones are unseen.
  auto ran = fetchOf("healthy.json");
  ran.refused = {"nvme0n1"};
  EXPECT_EQ(evaluateLvm(ran, LvmPolicy{}).reason, "BlockDevicesRefused");
  // A managed VG not seen through refused devices: UNKNOWN, never a false VolumeGroupMissing.
  auto none = fetchOf("no-vgs.json");
  none.refused = {"vda"};
  LvmPolicy managed;
  managed.volume_group = "vmdata";
  auto m = evaluateLvm(none, managed);
  EXPECT_EQ(m.status, Status::Unknown);
  EXPECT_TRUE(contains(m.message, "vmdata is not in a report that cannot see every disk"))
      << m.message;
  none.refused.clear();
  EXPECT_EQ(evaluateLvm(none, managed).reason, "VolumeGroupMissing");
}

TEST(LvmEvaluate, HelperThatDoesNotAnswer) {
  LvmFetch f;
  f.command = "lvm (device-probe helper)";
  f.failure = LvmRunFailure::HelperUnavailable;
  f.error =
      "failed to ask the device-probe helper at /run/nodegate/device-probe.sock: connect: "
      "Connection refused";
  auto r = evaluateLvm(f, LvmPolicy{});
  EXPECT_EQ(r.status, Status::Unknown);
  EXPECT_EQ(r.reason, "DeviceProbeUnavailable");
  EXPECT_EQ(r.message, f.error);
}

TEST(LvmProbe, RunsThroughTheSeam) {
  auto exec = std::make_shared<FakeExec>();
  exec->reply(readFixture("thinpool-85.std.json"));
  LvmProbe probe(std::make_shared<LvmReportSource>(exec));
  HostRoot host("/nonexistent");
  Config cfg;
  ProbeContext ctx{host, cfg};
  auto r = probe.run(ctx);
  EXPECT_EQ(r.status, Status::Warn);
  EXPECT_EQ(r.evidence.front().source, "lvm command");
  probe.run(ctx);
  EXPECT_EQ(exec->calls, 2);  // the lvm probe always asks lvm afresh
}

}  // namespace
}  // namespace nodegate
