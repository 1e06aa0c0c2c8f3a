#include "kvm_backend.h"

#include <filesystem>

#include "cpu_virt.h"
#include "kernel_modules.h"

namespace nodegate {
namespace {

// Precedence when several are present: the hardware backends first, because a host that has
// kvm_intel and kvm_pvm both runs standard guests on kvm_intel.
constexpr std::string_view kKnownBackends[] = {"kvm_intel", "kvm_amd", "kvm_pvm", "kvm_hv",
                                               "kvm_pr"};

}  // namespace

bool isKnownKvmBackend(std::string_view module) {
  for (auto k : kKnownBackends)
    if (k == module) return true;
  return false;
}

bool isParavirtualKvmBackend(std::string_view module) {
  return module == "kvm_pvm";
}

KvmBackend pickKvmBackend(const std::optional<std::set<std::string>>& loaded,
                          const std::set<std::string>& sysfs, std::string_view proc_modules_path,
                          std::string_view sys_module_path) {
  KvmBackend b;
  auto note = [&](const std::string& name) {
    std::string how;
    if (loaded && loaded->count(name))
      how = name + " loaded (" + std::string(proc_modules_path) + ")";
    else
      // Present under /sys/module but not in /proc/modules: built into the kernel (a built-in
      // module with parameters still gets its /sys/module directory).
      how = name + " built in (" + std::string(sys_module_path) + "/" + name + ")";
    b.seen += (b.seen.empty() ? "" : ", ") + how;
    b.modules.push_back(name);
  };
  auto present = [&](const std::string& name) {
    return (loaded && loaded->count(name)) || sysfs.count(name);
  };
  for (auto k : kKnownBackends)
    if (present(std::string(k))) note(std::string(k));
  // A backend nodegate does not know by name still is one: kvm_<something>.
  std::set<std::string> others;
  if (loaded)
    for (const auto& m : *loaded)
      if (m.rfind("kvm_", 0) == 0 && !isKnownKvmBackend(m)) others.insert(m);
  for (const auto& m : sysfs)
    if (m.rfind("kvm_", 0) == 0 && !isKnownKvmBackend(m)) others.insert(m);
  for (const auto& m : others) note(m);
  return b;
}

std::string cpuKvmModule(const CpuInfo& cpu) {
  if (cpu.arch != "x86") return {};
  if (cpu.flags.count("vmx")) return "kvm_intel";
  if (cpu.flags.count("svm")) return "kvm_amd";
  return {};
}

KvmBackend readKvmBackend(const HostRoot& host) {
  std::optional<std::set<std::string>> loaded;
  if (auto text = readFile(host.proc("modules"))) loaded = parseProcModules(*text);
  // Only names are read, and only those that start with "kvm": a few of ~100 entries. A sysfs
  // that cannot be read, or a module/ that cannot be listed, leaves the backend unknown, never
  // "none"; an absent module/ in a readable sysfs lists nothing (as elsewhere: absence is a
  // value only where the place to look is there).
  std::set<std::string> sysfs;
  std::string unreadable;
  if (auto sys = sysfsReadable(host); !sys) unreadable = sys.error().message;
  std::error_code ec;
  std::filesystem::directory_iterator it(host.sys("module"), ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    auto name = it->path().filename().string();
    if (name.rfind("kvm", 0) == 0) sysfs.insert(normalizeModuleName(name));
  }
  if (ec && ec != std::errc::no_such_file_or_directory && unreadable.empty())
    unreadable = "failed to list " + host.sys("module") + ": " + ec.message();
  auto b = pickKvmBackend(loaded, sysfs, host.proc("modules"), host.sys("module"));
  b.unreadable = std::move(unreadable);
  return b;
}

KvmHostFacts readKvmHostFacts(const HostRoot& host) {
  KvmHostFacts f;
  if (auto text = readFile(host.proc("cpuinfo"))) {
    auto cpu = parseCpuInfo(*text);
    f.cpuinfo_read = true;
    f.arch = cpu.arch;
    f.cpu_module = cpuKvmModule(cpu);
    f.hypervisor = cpu.flags.count("hypervisor") > 0;
  }
  f.backend = readKvmBackend(host);
  return f;
}

std::string describeBackend(const KvmBackend& b) {
  if (b.modules.empty())
    return b.unreadable.empty() ? "none loaded" : "unknown (" + b.unreadable + ")";
  std::string out;
  for (const auto& m : b.modules)
    out += (out.empty() ? "" : ", ") + m + (isParavirtualKvmBackend(m) ? " (paravirtual)" : "");
  return out;
}

std::string backendEvidence(const KvmBackend& b) {
  if (b.modules.empty()) return describeBackend(b);
  return b.unreadable.empty() ? b.seen : b.seen + "; built-in ones unknown (" + b.unreadable + ")";
}

}  // namespace nodegate
