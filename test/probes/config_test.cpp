// --config validation against the specs (nodegate/spec.h) and what the registry derives from
// them: the default gate, the Node conditions, the settings every section accepts.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <regex>
#include <set>

#include "local_pv.h"
#include "lvm.h"
#include "nodegate/agent_settings.h"
#include "nodegate/config.h"
#include "nodegate/host_root.h"
#include "nodegate/registry.h"

namespace nodegate {
namespace {

using ::testing::HasSubstr;

std::string errorOf(std::string_view text) {
  auto r = parseConfig(text, configSchema());
  return r ? std::string("accepted") : r.error().message;
}

TEST(ConfigValidation, WrongTypeNamesKeyAndValue) {
  auto e = errorOf(R"({"checks":{"lvm":{"data_warn_percent":"eighty"}}})");
  EXPECT_THAT(e, HasSubstr("checks.lvm.data_warn_percent"));
  EXPECT_THAT(e, HasSubstr("\"eighty\""));
  EXPECT_THAT(e, HasSubstr("must be a number from 0 to 100"));
  EXPECT_THAT(errorOf(R"({"checks":{"local-pv":{"use_lvm":"yes"}}})"),
              HasSubstr("checks.local-pv.use_lvm = \"yes\": must be true or false"));
  EXPECT_THAT(errorOf(R"({"checks":{"node-services":{"units":"kubelet.service"}}})"),
              HasSubstr("checks.node-services.units = \"kubelet.service\""));
  EXPECT_THAT(errorOf(R"({"checks":{"node-services":{"units":["a", 3]}}})"),
              HasSubstr("(3 is not one)"));
  EXPECT_THAT(errorOf(R"({"checks":{"lvm":{"volume_group":7}}})"),
              HasSubstr("checks.lvm.volume_group = 7: must be a string"));
}

TEST(ConfigValidation, OutOfBoundsNamesKeyAndValue) {
  EXPECT_THAT(errorOf(R"({"checks":{"lvm":{"data_warn_percent":-5}}})"),
              HasSubstr("checks.lvm.data_warn_percent = -5: must be a number from 0 to 100"));
  EXPECT_THAT(errorOf(R"({"checks":{"lvm":{"timeout_seconds":0}}})"),
              HasSubstr("checks.lvm.timeout_seconds = 0: must be a number from 0.05 to 3600"));
  EXPECT_THAT(errorOf(R"({"checks":{"kube":{"qps":1e308}}})"), HasSubstr("checks.kube.qps = "));
  EXPECT_THAT(errorOf(R"({"checks":{"hugepages":{"min_free":1.5}}})"),
              HasSubstr("checks.hugepages.min_free = 1.5: must be a whole number"));
  EXPECT_THAT(errorOf(R"({"damping":{"lvm":1000000}})"),
              HasSubstr("damping.lvm = 1000000: must be a whole number from 1 to 100"));
  EXPECT_THAT(errorOf(R"({"checks":{"lvm":{"timeout_seconds":true}}})"),
              HasSubstr("checks.lvm.timeout_seconds = true"));
}

TEST(ConfigValidation, UnknownNamesAreErrors) {
  EXPECT_THAT(errorOf(R"({"checks":{"lvmm":{}}})"),
              HasSubstr("unknown check or section checks.lvmm"));
  EXPECT_THAT(errorOf(R"({"checks":{"lvm":{"data_warn":70}}})"),
              HasSubstr("unknown key checks.lvm.data_warn (known: data_warn_percent"));
  EXPECT_THAT(errorOf(R"({"checks":{"kube":{"qsp":5}}})"),
              HasSubstr("unknown key checks.kube.qsp"));
  EXPECT_THAT(errorOf(R"({"gate":{"required":["cpu-virt","kvm-devcie"]}})"),
              HasSubstr("gate.required names unknown check \"kvm-devcie\""));
  EXPECT_THAT(errorOf(R"({"gate":{"requried":[]}})"), HasSubstr("unknown key gate.requried"));
  EXPECT_THAT(errorOf(R"({"damping":{"lvn":2}})"), HasSubstr("unknown check damping.lvn"));
  EXPECT_THAT(errorOf(R"({"checks":{"cpu-virt":{"triggers":["netlink","bogus"]}}})"),
              HasSubstr("checks.cpu-virt.triggers = [\"netlink\",\"bogus\"]: holds \"bogus\""));
}

TEST(ConfigValidation, DuplicateKeysAreErrors) {
  EXPECT_THAT(errorOf(R"({"gate":{"required":["tun"]},"gate":{"required":[]}})"),
              HasSubstr("key \"gate\" is given twice"));
  EXPECT_THAT(errorOf(R"({"checks":{"lvm":{"data_warn_percent":70,"data_warn_percent":75}}})"),
              HasSubstr("key \"checks.lvm.data_warn_percent\" is given twice"));
  // The same key in two different objects is fine.
  EXPECT_EQ(errorOf(R"({"checks":{"lvm":{"volume_group":"a"},"local-pv":{"volume_group":"a"}}})"),
            "accepted");
  // Objects inside arrays have their own key sets.
  EXPECT_THAT(errorOf(R"({"checks":{"lvm":{"x":[{"a":1},{"a":2}]}}})"),
              HasSubstr("unknown key checks.lvm.x"));
}

TEST(ConfigValidation, ValidValuesAreTakenAndDefaultsComeFromSpecs) {
  auto c = parseConfig(R"({"checks":{"lvm":{"data_warn_percent":75,"timeout_seconds":3},
                            "cpu-virt":{"triggers":["netlink"]},"kube":{"qps":20}},
                           "damping":{"lvm":3}})",
                       configSchema());
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->number(kLvmDataWarnSetting), 75);
  EXPECT_EQ(c->number(kLvmDataFailSetting), 90);
  EXPECT_EQ(c->probeTimeout("lvm"), 3);
  EXPECT_EQ(c->probeTimeout("tun"), 10);
  EXPECT_TRUE(c->hasProbeTimeout("lvm"));
  EXPECT_FALSE(c->hasProbeTimeout("tun"));
  EXPECT_EQ(c->extraTriggers("cpu-virt"), std::vector<std::string>{"netlink"});
  EXPECT_EQ(c->number(kKubeQpsSetting), 20);
  EXPECT_EQ(c->number(kKubeBurstSetting), 10);
  EXPECT_EQ(c->damping.at("lvm"), 3);
  EXPECT_EQ(c->required, configSchema().defaultRequired());
  // A derived default comes from the caller.
  EXPECT_EQ(c->number(kLocalPvApiMaxAgeSetting, 180), 180);
  EXPECT_EQ(c->text(kLocalPvVolumeGroupSetting, "vg0"), "vg0");
}

TEST(ConfigValidation, UncheckedSetValueOfTheWrongTypeReadsAsTheDefault) {
  Config c;
  c.set("lvm", "data_warn_percent", "eighty");
  EXPECT_EQ(c.number(kLvmDataWarnSetting), 80);
  c.set("lvm", "data_warn_percent", 500);
  EXPECT_EQ(c.number(kLvmDataWarnSetting), 80);
  EXPECT_FALSE(c.has(kLvmDataWarnSetting));
  c.set("lvm", "data_warn_percent", 60);
  EXPECT_EQ(c.number(kLvmDataWarnSetting), 60);
}

TEST(ConfigValidation, AFifoConfigIsAnErrorNotAHang) {
  char dir[] = "/tmp/nodegate-cfg-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  const std::string fifo = std::string(dir) + "/config.json";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto r = loadConfig(fifo, configSchema());  // before the fix: blocks until a writer appears
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.error().message, HasSubstr("not a regular file (a FIFO)"));
  ::unlink(fifo.c_str());
  ::rmdir(dir);
}

TEST(Specs, DefaultGateAndConditionsAreDerivedFromSpecs) {
  // The default gate and the condition map as they were hard-coded before the specs, with
  // cpu-level feeding VirtualizationReady (not in the default gate).
  EXPECT_EQ(configSchema().defaultRequired(),
            (std::set<std::string>{"cpu-virt", "kvm-device", "tun", "kernel-modules"}));
  EXPECT_EQ(defaultConfig().required, configSchema().defaultRequired());
  std::map<std::string, std::vector<std::string>> got;
  for (auto& [type, checks] : configSchema().conditions()) got[type] = checks;
  std::map<std::string, std::vector<std::string>> want = {
      {"VirtualizationReady",
       {"cpu-virt", "cpu-level", "kvm-device", "vhost-net", "tun", "kernel-modules"}},
      {"LocalStorageHealthy", {"lvm", "local-pv"}},
      {"GuestDNSHealthy", {"dns-path"}},
      {"TimeSynchronized", {"time-sync"}},
      {"KubeVirtNodeHealthy", {"kubevirt-node"}},
  };
  EXPECT_EQ(got, want);
}

TEST(Specs, EverySpecIsWellFormed) {
  const std::regex kebab("^[a-z0-9]+(-[a-z0-9]+)*$");
  const std::regex snake("^[a-z0-9]+(_[a-z0-9]+)*$");
  std::set<std::string> names;
  auto wellFormed = [&](const std::string& section, const std::vector<const SettingSpec*>& list) {
    std::set<std::string> keys;
    for (const auto* s : commonProbeSettings()) keys.insert(s->key);
    for (const auto* s : list) {
      SCOPED_TRACE(section + "." + s->key);
      EXPECT_EQ(s->section, section);
      EXPECT_TRUE(std::regex_match(s->key, snake));
      EXPECT_TRUE(keys.insert(s->key).second) << "key declared twice (or shadows a common one)";
      EXPECT_FALSE(s->doc.empty());
      if (s->fallback.is_null()) {
        EXPECT_FALSE(s->derived.empty()) << "a derived default must say how";
      } else {
        EXPECT_FALSE(s->check(s->fallback)) << "the default is outside its own bounds";
      }
      if (s->type == SettingType::Number || s->type == SettingType::Integer) {
        EXPECT_LT(s->min, s->max);
      } else if (s->type != SettingType::Flag) {
        EXPECT_GT(s->max, 0) << "texts and lists need a size bound";
      }
    }
  };
  for (const auto* p : probeSpecs()) {
    EXPECT_TRUE(std::regex_match(p->name, kebab)) << p->name;
    EXPECT_TRUE(names.insert(p->name).second) << p->name << " twice";
    EXPECT_FALSE(p->summary.empty()) << p->name;
    EXPECT_TRUE(p->triggers & kTriggerTimer) << p->name << ": the resync must run every probe";
    wellFormed(p->name, p->settings);
  }
  for (const auto* s : configSchema().sections) {
    EXPECT_FALSE(names.count(s->name)) << s->name << " is a check and a section";
    wellFormed(s->name, s->settings);
  }
  for (const auto* s : commonProbeSettings()) EXPECT_FALSE(s->check(s->fallback)) << s->key;
  // A check a probe reads is one the registry has (a misspelt name would be read as "never
  // ran" forever); the runner refuses cycles among them.
  for (const auto* p : probeSpecs())
    for (const auto& r : p->reads) {
      EXPECT_TRUE(names.count(r)) << p->name << " reads " << r << ", which is no check";
      EXPECT_NE(r, p->name);
    }
}

TEST(Specs, ProbesAndSpecsAgree) {
  auto probes = makeProbes(productionSeams());
  ASSERT_EQ(probes.size(), probeSpecs().size());
  for (std::size_t i = 0; i < probes.size(); ++i)
    EXPECT_EQ(&probes[i]->spec(), probeSpecs()[i]) << probes[i]->name();
}

// docs/config.md's settings section and the chart's schema of `config` are generated from the
// specs; NODEGATE_UPDATE_DOCS=1 rewrites them (the same way goldens are updated).
TEST(Specs, DocsAndChartSchemaMatchTheSpecs) {
  const std::string root = std::string(NODEGATE_TEST_DIR) + "/..";
  const bool update = std::getenv("NODEGATE_UPDATE_DOCS") != nullptr;

  const std::string doc_path = root + "/docs/config.md";
  auto doc = readFile(doc_path);
  ASSERT_TRUE(doc.ok()) << doc.error().message;
  const std::string begin = "<!-- settings: generated from the specs, do not edit -->\n";
  const std::string end = "<!-- settings: end -->";
  auto b = doc->find(begin), e = doc->find(end);
  ASSERT_NE(b, std::string::npos) << doc_path << " lost its begin marker";
  ASSERT_NE(e, std::string::npos) << doc_path << " lost its end marker";
  const std::string want_table = "\n" + settingsMarkdown(configSchema()) + "\n";
  const std::string have_table = doc->substr(b + begin.size(), e - b - begin.size());
  if (update) {
    std::ofstream(doc_path) << doc->substr(0, b + begin.size()) + want_table + doc->substr(e);
  } else {
    EXPECT_EQ(have_table, want_table) << doc_path << " is stale: NODEGATE_UPDATE_DOCS=1";
  }

  const std::string chart_path = root + "/charts/nodegate/values.schema.json";
  auto chart_text = readFile(chart_path);
  ASSERT_TRUE(chart_text.ok()) << chart_text.error().message;
  auto chart = nlohmann::ordered_json::parse(*chart_text);
  const auto want = nlohmann::ordered_json::parse(configJsonSchema(configSchema()).dump());
  if (update) {
    chart["properties"]["config"] = want;
    std::ofstream(chart_path) << chart.dump(2) << "\n";
  } else {
    EXPECT_EQ(chart["properties"]["config"], want)
        << chart_path << " is stale: NODEGATE_UPDATE_DOCS=1";
    // The enum of gate.required is the registry's list of checks.
    EXPECT_EQ(chart["properties"]["config"]["properties"]["gate"]["properties"]["required"]["items"]
                   ["enum"]
                       .get<std::vector<std::string>>(),
              configSchema().checkNames());
  }
}

}  // namespace
}  // namespace nodegate
