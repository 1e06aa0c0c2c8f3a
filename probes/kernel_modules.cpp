#include "kernel_modules.h"

#include <sys/stat.h>

#include <cctype>
#include <cerrno>

#include "device_node.h"
#include "text.h"

namespace nodegate {

std::string normalizeModuleName(std::string_view name) {
  std::string out(name);
  for (auto& c : out)
    if (c == '-') c = '_';
  return out;
}

namespace {

bool validModuleName(std::string_view n) {
  if (n.empty() || n.size() > 64) return false;  // MODULE_NAME_LEN is 56 on 64-bit kernels
  for (char c : n)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-')) return false;
  return true;
}

void appendWord(std::string& list, const std::string& word) {
  if (word.empty()) return;
  if (!list.empty()) list += ' ';
  list += word;
}

}  // namespace

std::set<std::string> parseProcModules(std::string_view text) {
  std::set<std::string> out;
  forEachLine(text, [&](std::string_view line) {
    std::string_view fields[2];
    int n = 0;
    forEachWord(line, [&](std::string_view w) {
      if (n < 2) fields[n] = w;
      ++n;
    });
    if (n < 2 || !validModuleName(fields[0]) || !parseU64(fields[1])) return;
    out.insert(normalizeModuleName(fields[0]));
  });
  return out;
}

std::set<std::string> parseModulesBuiltin(std::string_view text) {
  std::set<std::string> out;
  forEachLine(text, [&](std::string_view line) {
    line = trim(line);
    if (line.size() < 4 || line.substr(line.size() - 3) != ".ko") return;
    auto slash = line.rfind('/');
    auto base = line.substr(slash == std::string_view::npos ? 0 : slash + 1);
    base.remove_suffix(3);
    if (validModuleName(base)) out.insert(normalizeModuleName(base));
  });
  return out;
}

std::map<std::string, std::string> parseModulesDevname(std::string_view text) {
  std::map<std::string, std::string> out;
  forEachLine(text, [&](std::string_view line) {
    line = trim(line);
    if (line.empty() || line.front() == '#') return;
    std::string_view f[3];
    int n = 0;
    forEachWord(line, [&](std::string_view w) {
      if (n < 3) f[n] = w;
      ++n;
    });
    if (n != 3 || !validModuleName(f[0]) || f[1].empty() || f[1].size() > 255) return;
    if (f[2].size() < 2 || (f[2][0] != 'c' && f[2][0] != 'b')) return;
    out[normalizeModuleName(f[0])] = std::string(f[1]);
  });
  return out;
}

std::optional<bool> kernelModuleSupport(const HostRoot& host) {
  struct stat st {};
  if (::stat(host.proc("modules").c_str(), &st) == 0) return true;
  if (errno == ENOENT && ::stat(host.proc("sys/kernel/osrelease").c_str(), &st) == 0) return false;
  return std::nullopt;
}

namespace {

// The Kconfig option that builds each module nodegate asks for.
std::string kconfigOf(const std::string& module) {
  static const std::map<std::string, std::string> kOptions = {{"kvm", "CONFIG_KVM"},
                                                              {"kvm_intel", "CONFIG_KVM_INTEL"},
                                                              {"kvm_amd", "CONFIG_KVM_AMD"},
                                                              {"tun", "CONFIG_TUN"},
                                                              {"vhost_net", "CONFIG_VHOST_NET"}};
  auto it = kOptions.find(module);
  return it != kOptions.end() ? it->second : "the option for " + module;
}

}  // namespace

std::string moduleHint(const std::vector<std::string>& modules,
                       std::optional<bool> module_support) {
  std::string names, options;
  for (const auto& m : modules) {
    appendWord(names, m);
    options += (options.empty() ? "" : ", ") + kconfigOf(m) + "=y";
  }
  if (module_support == false)
    return "this kernel cannot load modules (it has no /proc/modules): boot one built with " +
           options;
  if (modules.size() == 1)
    return "load the " + names + " module: modprobe " + names +
           " (persist it in /etc/modules-load.d/)";
  return "load them: modprobe -a " + names + " (persist in /etc/modules-load.d/)";
}

std::string recommendedBy(const std::string& module) {
  return module == "vhost_net" ? "vhost-net" : module;
}

std::map<std::string, bool> requiredModules(const ModulesObservation& o) {
  std::map<std::string, bool> req{{"tun", true}, {"vhost_net", false}};
  // arm64 KVM is bool in Kconfig: it is never a module, the misc device is the evidence.
  if (o.arch != "arm64") req["kvm"] = true;
  if (!o.backend.primary().empty())
    req[o.backend.primary()] = true;
  else if (!o.cpu_module.empty())
    req[o.cpu_module] = true;
  return req;
}

bool noBackendPossible(const ModulesObservation& o) {
  return o.arch == "x86" && o.backend.modules.empty() && o.backend.unreadable.empty() &&
         o.cpu_module.empty();
}

namespace {

// Where a required module was found, or "" when it was not.
std::string whereFound(const ModulesObservation& o, const std::string& name) {
  std::string where;
  if (o.loaded->count(name))
    where = "loaded";
  else if (o.builtin && o.builtin->count(name))
    where = "built in";
  else if (o.in_sysfs.count(name))
    where = "built in (sysfs module directory)";
  else if (o.misc_registered.count(name))
    where = "in the running kernel (misc device registered)";
  else if (auto d = o.devname.find(name); d != o.devname.end())
    return "not loaded; autoloads on first open of device node " + d->second + " (modules.devname)";
  if (!where.empty() && name == o.backend.primary())
    where += isParavirtualKvmBackend(name) ? "; the KVM backend, paravirtual (see kvm-device)"
                                           : "; the KVM backend";
  return where;
}

}  // namespace

CheckResult evaluateKernelModules(const ModulesObservation& o) {
  if (!o.loaded) {
    return makeResult(kKernelModulesCheck, Status::Unknown, "ModulesUnreadable", o.loaded_error,
                      "check that the host's /proc is mounted (--host-root / --path.procfs)");
  }
  std::vector<Evidence> ev;
  std::string missing_required, missing_optional, undecided;
  std::vector<std::string> to_load;
  for (const auto& [name, required] : requiredModules(o)) {
    if (auto where = whereFound(o, name); !where.empty()) {
      ev.push_back({"module " + name, where});
      continue;
    }
    // Without modules.builtin a built-in module shows only in sysfs, and a kernel that loads
    // modules may still autoload it: neither unread place makes it missing.
    if (!o.builtin && required && (!o.no_module_support || !o.sysfs_error.empty())) {
      appendWord(undecided, name);
      ev.push_back({"module " + name, o.sysfs_error.empty()
                                          ? "not loaded; built-in list unreadable"
                                          : "not loaded; built-in list and sysfs unreadable"});
      continue;
    }
    // A recommended module is one fact of another check (vhost_net: the vhost-net check): it
    // is shown here, but only what this check requires decides its status (#21).
    ev.push_back({"module " + name, required ? "missing"
                                             : "missing (recommended; judged by the " +
                                                   recommendedBy(name) + " check)"});
    appendWord(required ? missing_required : missing_optional, name);
    // kvm alone is no use where no backend can load: do not advise loading it.
    if (!(name == "kvm" && noBackendPossible(o))) to_load.push_back(name);
  }
  const bool no_backend = noBackendPossible(o);
  // A backend that is there is named on its module's line; say so when there is none.
  if (o.backend.modules.empty() && o.arch != "arm64")
    ev.push_back({"kvm backend", no_backend ? "none: the CPU exposes no vmx/svm, so neither "
                                              "kvm_intel nor kvm_amd can load (see cpu-virt)"
                                            : describeBackend(o.backend)});
  if (o.arch == "arm64")
    ev.push_back({"module kvm", !o.kvm_registered   ? "unknown (arm64): sysfs cannot be read"
                                : *o.kvm_registered ? "built in (arm64, misc device present)"
                                                    : "not in the running kernel (arm64)"});

  std::optional<bool> support;
  if (o.no_module_support) support = false;
  std::string hint = to_load.empty() ? std::string() : moduleHint(to_load, support);
  if (no_backend)
    hint = "no KVM backend can load on a CPU without vmx/svm: see cpu-virt" +
           (hint.empty() ? std::string() : "; " + hint);
  CheckResult r;
  if (!missing_required.empty() || no_backend) {
    std::string msg;
    if (!missing_required.empty())
      msg = "required modules neither loaded nor built in: " + missing_required;
    if (no_backend)
      msg += std::string(msg.empty() ? "" : "; ") +
             "no KVM backend can load: the CPU exposes no vmx/svm";
    if (!missing_optional.empty()) msg += "; recommended: " + missing_optional;
    r = makeResult(kKernelModulesCheck, Status::Fail, "ModulesMissing", msg, hint);
  } else if (!undecided.empty()) {
    r = makeResult(kKernelModulesCheck, Status::Unknown, "BuiltinListUnreadable",
                   "not loaded, and cannot tell whether built in: " + undecided,
                   "mount the host's /lib/modules (--path.rootfs) so modules.builtin of release " +
                       (o.release.empty() ? std::string("?") : o.release) + " can be read" +
                       (o.sysfs_error.empty() ? "" : ", or its /sys (--path.sysfs)"));
  } else {
    r = makeResult(kKernelModulesCheck, Status::Pass, "ModulesPresent",
                   "every module KubeVirt needs is loaded or built in" +
                       (missing_optional.empty() ? std::string()
                                                 : "; recommended, missing: " + missing_optional));
  }
  r.evidence = std::move(ev);
  r.evidence.push_back(
      {"kernel release (osrelease)", o.release.empty() ? "unreadable" : o.release});
  if (o.no_module_support)
    r.evidence.push_back({"procfs modules", "absent: kernel built without module support"});
  r.evidence.push_back({"modules.builtin", o.builtin
                                               ? std::to_string(o.builtin->size()) + " modules"
                                               : o.builtin_error});
  return r;
}

CheckResult KernelModulesProbe::run(const ProbeContext& ctx) {
  ModulesObservation o;
  auto kvm = readKvmHostFacts(ctx.host);
  o.arch = kvm.arch;
  o.cpu_module = kvm.cpu_module;
  o.backend = kvm.backend;
  o.kvm_registered = miscRegistered(ctx.host, "kvm");
  if (auto sys = sysfsReadable(ctx.host); !sys) o.sysfs_error = sys.error().message;
  if (auto text = readFile(ctx.host.proc("modules"))) {
    o.loaded = parseProcModules(*text);
  } else if (kernelModuleSupport(ctx.host) == false) {
    // procfs is there but has no modules file: CONFIG_MODULES=n, everything is built in.
    o.loaded.emplace();
    o.no_module_support = true;
  } else {
    o.loaded_error = text.error().message;
  }
  if (auto rel = readValue(ctx.host.proc("sys/kernel/osrelease"))) o.release = *rel;
  if (o.release.empty() || o.release.find('/') != std::string::npos) {
    o.release.clear();
    o.builtin_error = "failed to read " + ctx.host.proc("sys/kernel/osrelease");
  } else if (auto text = readFile(ctx.host.root("lib/modules/" + o.release + "/modules.builtin"))) {
    o.builtin = parseModulesBuiltin(*text);
    if (auto dn = readFile(ctx.host.root("lib/modules/" + o.release + "/modules.devname")))
      o.devname = parseModulesDevname(*dn);
  } else {
    o.builtin_error = text.error().message;
  }
  // A driver that registered its misc device is in the running kernel. Not the KVM backend:
  // on x86 any backend registers "kvm", so the device cannot say which one.
  const std::map<std::string, std::string> misc = {
      {"kvm", "kvm"}, {"tun", "tun"}, {"vhost_net", "vhost-net"}};
  struct stat st {};
  for (const auto& [name, required] : requiredModules(o)) {
    (void)required;
    if (::stat(ctx.host.sys("module/" + name).c_str(), &st) == 0) o.in_sysfs.insert(name);
    auto m = misc.find(name);
    if (m != misc.end() && ::stat(ctx.host.sys("class/misc/" + m->second).c_str(), &st) == 0)
      o.misc_registered.insert(name);
  }
  return evaluateKernelModules(o);
}

}  // namespace nodegate
