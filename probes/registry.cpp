// Every probe nodegate has, one line each, in the order `nodegate check` prints them: its spec
// and how to build it. A test asserts the names are unique and kebab-case.
#include "nodegate/registry.h"

#include "cgroups.h"
#include "cpu_level.h"
#include "cpu_virt.h"
#include "device_probe_client.h"
#include "dns_path.h"
#include "hugepages.h"
#include "iommu.h"
#include "kernel_modules.h"
#include "kubevirt_node.h"
#include "kvm_device.h"
#include "local_pv.h"
#include "lvm.h"
#include "nested_virt.h"
#include "node_services.h"
#include "nodegate/agent_settings.h"
#include "time_sync.h"
#include "tun.h"
#include "vhost_net.h"

namespace nodegate {
namespace {

// What probes built in one makeProbes() call share: one lvm run per cycle for lvm and local-pv.
struct Shared {
  const Seams& seams;
  std::shared_ptr<LvmReportSource> lvm_reports;
  // The device checks ask the device-probe helper first when there is one.
  std::unique_ptr<Probe> device(std::unique_ptr<Probe> local) const {
    return devprobe::viaDeviceProbe(std::move(local), seams.device_probe);
  }
};

// lvm and local-pv share one lvm run per cycle through this source; its block-device work is
// the helper's when there is one.
std::shared_ptr<LvmReportSource> lvmReports(const Seams& seams) {
  std::shared_ptr<LvmAccess> access;
  if (seams.device_probe)
    access = std::make_shared<devprobe::HelperLvmAccess>(seams.device_probe);
  else
    access = std::make_shared<LocalLvmAccess>(seams.exec, seams.device);
  return std::make_shared<LvmReportSource>(access);
}

struct Entry {
  const ProbeSpec* spec;
  std::unique_ptr<Probe> (*make)(Shared&);
};

template <typename P, typename... A>
std::unique_ptr<Probe> make(A&&... args) {
  return std::make_unique<P>(std::forward<A>(args)...);
}

const Entry kEntries[] = {
    {&kCpuVirtSpec, [](Shared&) { return make<CpuVirtProbe>(); }},
    {&kCpuLevelSpec, [](Shared&) { return make<CpuLevelProbe>(); }},
    {&kKvmDeviceSpec, [](Shared& s) { return s.device(make<KvmDeviceProbe>(s.seams.device)); }},
    {&kVhostNetSpec, [](Shared& s) { return s.device(make<VhostNetProbe>(s.seams.device)); }},
    {&kTunSpec, [](Shared& s) { return s.device(make<TunProbe>(s.seams.device)); }},
    {&kKernelModulesSpec, [](Shared&) { return make<KernelModulesProbe>(); }},
    {&kNestedVirtSpec, [](Shared&) { return make<NestedVirtProbe>(); }},
    {&kIommuSpec, [](Shared&) { return make<IommuProbe>(); }},
    {&kCgroupsSpec, [](Shared&) { return make<CgroupsProbe>(); }},
    {&kHugepagesSpec, [](Shared&) { return make<HugepagesProbe>(); }},
    {&kTimeSyncSpec, [](Shared& s) { return make<TimeSyncProbe>(s.seams.dbus, s.seams.clock); }},
    {&kLvmSpec, [](Shared& s) { return make<LvmProbe>(s.lvm_reports); }},
    {&kLocalPvSpec,
     [](Shared& s) {
       return make<LocalPvProbe>(s.lvm_reports, s.seams.device,
                                 std::make_unique<KubeletDirPvSource>(), s.seams.api_pvs);
     }},
    {&kDnsPathSpec,  // agent/dns fills the verdicts
     [](Shared& s) {
       return make<DnsPathProbe>(s.seams.dns_verdicts, s.seams.cluster_dns, s.seams.vmi_dns);
     }},
    {&kNodeServicesSpec, [](Shared& s) { return make<NodeServicesProbe>(s.seams.dbus); }},
    // Reads kvm-device, tun and vhost-net; the agent's API watches fill its source.
    {&kKubeVirtNodeSpec, [](Shared& s) { return make<KubeVirtNodeProbe>(s.seams.kubevirt); }},
};

}  // namespace

ProbeList makeProbes(const Seams& seams) {
  Shared shared{seams, lvmReports(seams)};
  ProbeList p;
  for (const auto& e : kEntries) p.push_back(e.make(shared));
  return p;
}

const std::vector<const ProbeSpec*>& probeSpecs() {
  static const std::vector<const ProbeSpec*> specs = [] {
    std::vector<const ProbeSpec*> out;
    for (const auto& e : kEntries) out.push_back(e.spec);
    return out;
  }();
  return specs;
}

const ConfigSchema& configSchema() {
  static const ConfigSchema schema{probeSpecs(), {&kKubeSectionSpec}};
  return schema;
}

Config defaultConfig() {
  Config c;
  c.required = configSchema().defaultRequired();
  return c;
}

}  // namespace nodegate
