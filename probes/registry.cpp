// Every probe nodegate has, one line each, in the order `nodegate check` prints them.
// A test asserts the names are unique and kebab-case.
#include "nodegate/registry.h"

#include "cgroups.h"
#include "cpu_virt.h"
#include "dns_path.h"
#include "hugepages.h"
#include "iommu.h"
#include "kernel_modules.h"
#include "kvm_device.h"
#include "local_pv.h"
#include "lvm.h"
#include "nested_virt.h"
#include "node_services.h"
#include "time_sync.h"
#include "tun.h"
#include "vhost_net.h"

namespace nodegate {

ProbeList makeProbes(const Seams& seams) {
  ProbeList p;
  p.push_back(std::make_unique<CpuVirtProbe>());
  p.push_back(std::make_unique<KvmDeviceProbe>(seams.device));
  p.push_back(std::make_unique<VhostNetProbe>(seams.device));
  p.push_back(std::make_unique<TunProbe>(seams.device));
  p.push_back(std::make_unique<KernelModulesProbe>());
  p.push_back(std::make_unique<NestedVirtProbe>());
  p.push_back(std::make_unique<IommuProbe>());
  p.push_back(std::make_unique<CgroupsProbe>());
  p.push_back(std::make_unique<HugepagesProbe>());
  p.push_back(std::make_unique<TimeSyncProbe>(seams.dbus, seams.clock));
  // lvm and local-pv share one lvm run per cycle through this source.
  auto lvm_reports = std::make_shared<LvmReportSource>(seams.exec, seams.device);
  p.push_back(std::make_unique<LvmProbe>(lvm_reports));
  p.push_back(std::make_unique<LocalPvProbe>(
      lvm_reports, seams.device, std::make_unique<KubeletDirPvSource>(), seams.api_pvs));
  p.push_back(std::make_unique<DnsPathProbe>(processDnsVerdicts(),  // agent/dns fills it
                                             seams.cluster_dns));
  p.push_back(std::make_unique<NodeServicesProbe>(seams.dbus));
  return p;
}

}  // namespace nodegate
