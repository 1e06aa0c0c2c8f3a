#include "cli/options.h"

#include <arpa/inet.h>
#include <unistd.h>

#include <cstdlib>
#include <functional>
#include <map>

#include "lvm_source.h"
#include "nodegate/registry.h"
#include "publish/kube/node_state.h"

namespace nodegate {
namespace {

Error usageError(const std::string& msg) {
  return Error{EINVAL, msg};
}

bool parseDouble(const std::string& s, double* out) {
  char* end = nullptr;
  *out = std::strtod(s.c_str(), &end);
  return !s.empty() && end && *end == '\0';
}

// --resync: at least half a second (a cycle forks lvm and walks /proc), at most a day; NaN and
// infinities are not numbers of seconds.
constexpr double kMinResync = 0.5, kMaxResync = 86400;

// "ADDR:PORT", ":PORT", "PORT" or "[v6]:PORT" with a numeric address (what the HTTP listener
// binds; inet_pton, so 999.1.1.1 is refused instead of wrapping to 231.1.1.1) and a port from 1
// to 65535.
Result<void> checkListen(const std::string& flag, const std::string& v) {
  auto bad = [&](const std::string& why) {
    return usageError("invalid value \"" + v + "\" for " + flag + ": " + why);
  };
  std::string host, port = v;
  if (!v.empty() && v[0] == '[') {
    auto close = v.find("]:");
    if (close == std::string::npos) return bad("want [IPv6]:PORT");
    host = v.substr(1, close - 1);
    port = v.substr(close + 2);
    in6_addr a6{};
    if (::inet_pton(AF_INET6, host.c_str(), &a6) != 1) return bad("not an IPv6 address");
  } else if (auto colon = v.rfind(':'); colon != std::string::npos) {
    host = v.substr(0, colon);
    port = v.substr(colon + 1);
    in_addr a4{};
    if (!host.empty() && ::inet_pton(AF_INET, host.c_str(), &a4) != 1)
      return bad("not an IPv4 address (IPv6 goes in brackets: [::1]:PORT)");
  }
  if (port.empty() || port.size() > 5 ||
      port.find_first_not_of("0123456789") != std::string::npos || std::stoi(port) < 1 ||
      std::stoi(port) > 65535)
    return bad("the port must be a number from 1 to 65535");
  return {};
}

}  // namespace

std::string usage() {
  return R"(usage: nodegate <command> [flags]

commands:
  check            one-shot preflight of this host (exit 0 all pass, 1 any FAIL,
                   2 usage error, 3 only WARN/UNKNOWN besides passes)
  agent            the daemon: probes on events and timer, HTTP endpoint, Kubernetes publishing
  device-probe     the privileged helper: fixed device checks over a unix socket
  dns trace        guest DNS queries hop by hop (asks a running agent)
  version          print the version

host paths:
  --host-root DIR        read the host below DIR (default /; the chart uses /host)
  --path.procfs DIR      override <host-root>/proc
  --path.sysfs DIR       override <host-root>/sys
  --path.devfs DIR       override <host-root>/dev
  --path.rootfs DIR      override <host-root> for files such as /lib/modules

check and agent:
  --device-probe PATH    ask the device-probe helper on this socket for the device checks
                         (kvm-device, vhost-net, tun) and the block-device work of lvm

check:
  --output table|json    output format (default table)
  --color auto|always|never
  --config FILE          JSON policy: required checks, thresholds

agent:
  --listen ADDR:PORT       /metrics /healthz /readyz (default 0.0.0.0:9810)
  --debug-listen ADDR:PORT everything incl. /api and the page (default 127.0.0.1:9811; "" = off)
  --health-listen ADDR:PORT /healthz /readyz only, for the kubelet's probes (default off; the
                           chart uses 127.0.0.1:9812)
  --kube auto|incluster|kubeconfig|none
  --kubeconfig FILE
  --node-name NAME         default $NODE_NAME, then the host name
  --prefix DOMAIN          label/condition prefix (default nodegate.io)
  --gate-label KEY=VALUE   default <prefix>/vm-ready=true
  --taint                  taint <prefix>/not-ready:NoSchedule while the gate is closed
  --lvm-command "CMD ARGS" default "lvm"
  --resync SECONDS         periodic re-probe, jittered (default 60; 0.5 to 86400)
  --dns-trace auto|on|off
  --dns-netns PATH         extra network namespace to trace (repeatable)
  --dns-ring-kib N         the tracer's event ring, KiB: a power of two, 16 to 65536 (default
                           2048; mapped twice, so it costs 2 x N KiB of RSS while traced)
  --log-level debug|info|warn|error
  --runbook-base-url URL   each check links <URL><check>.md (page, API, check table)

environment (a flag beats its variable; the chart sets them, so `kubectl exec ... nodegate check`
in the agent's container runs with the agent's settings):
  NODEGATE_HOST_ROOT, NODEGATE_CONFIG, NODEGATE_LVM_COMMAND, NODEGATE_RUNBOOK_BASE_URL,
  NODEGATE_DEVICE_PROBE

device-probe:
  --socket PATH            the unix socket to serve (mode 0600; root clients only)
  --lvm-command "CMD ARGS" the fixed lvm it runs (default "lvm"); --host-root and --path.*
                           as for check

dns trace:
  --vmi NS/NAME   only this VMI
  --follow        keep printing new queries
  --api URL       agent debug endpoint (default http://<debug-listen>)
)";
}

HostRoot Options::hostRoot() const {
  HostRoot h(host_root);
  if (!procfs.empty()) h.setProcfs(procfs);
  if (!sysfs.empty()) h.setSysfs(sysfs);
  if (!devfs.empty()) h.setDevfs(devfs);
  if (!rootfs.empty()) h.setRootfs(rootfs);
  return h;
}

std::pair<std::string, std::string> Options::gateLabel() const {
  std::string spec = gate_label_set ? gate_label : prefix + "/vm-ready=true";
  auto eq = spec.find('=');
  if (eq == std::string::npos) return {spec, "true"};
  return {spec.substr(0, eq), spec.substr(eq + 1)};
}

namespace {

using Setter = std::function<Result<void>(const std::string&)>;

// The flags that take a value, each with what checks and stores it in o.
std::map<std::string, Setter> valuedFlags(Options& o) {
  auto str = [](std::string* dst) -> Setter {
    return [dst](const std::string& v) -> Result<void> {
      *dst = v;
      return {};
    };
  };
  auto oneOf = [](std::string* dst, std::initializer_list<const char*> allowed,
                  std::string flag) -> Setter {
    std::vector<std::string> ok(allowed.begin(), allowed.end());
    return [dst, ok, flag](const std::string& v) -> Result<void> {
      for (const auto& a : ok)
        if (a == v) {
          *dst = v;
          return {};
        }
      return usageError("invalid value \"" + v + "\" for " + flag);
    };
  };
  return {
      {"--host-root", str(&o.host_root)},
      {"--path.procfs", str(&o.procfs)},
      {"--path.sysfs", str(&o.sysfs)},
      {"--path.devfs", str(&o.devfs)},
      {"--path.rootfs", str(&o.rootfs)},
      {"--output", oneOf(&o.output, {"table", "json"}, "--output")},
      {"--color", oneOf(&o.color, {"auto", "always", "never"}, "--color")},
      {"--config", str(&o.config_path)},
      {"--listen",
       [&o](const std::string& v) -> Result<void> {
         if (auto r = checkListen("--listen", v); !r) return r;
         o.listen = v;
         return {};
       }},
      {"--debug-listen",
       [&o](const std::string& v) -> Result<void> {
         if (!v.empty())  // "" turns the debug listener off
           if (auto r = checkListen("--debug-listen", v); !r) return r;
         o.debug_listen = v;
         return {};
       }},
      {"--health-listen",
       [&o](const std::string& v) -> Result<void> {
         if (!v.empty())  // "" (the default) turns the health listener off
           if (auto r = checkListen("--health-listen", v); !r) return r;
         o.health_listen = v;
         return {};
       }},
      {"--kube", oneOf(&o.kube, {"auto", "incluster", "kubeconfig", "none"}, "--kube")},
      {"--kubeconfig", str(&o.kubeconfig)},
      {"--node-name", str(&o.node_name)},
      {"--prefix", str(&o.prefix)},
      {"--gate-label",
       [&o](const std::string& v) -> Result<void> {
         if (v.find('=') == std::string::npos || v.front() == '=')
           return usageError("invalid value \"" + v + "\" for --gate-label: want KEY=VALUE");
         o.gate_label = v;
         o.gate_label_set = true;
         return {};
       }},
      {"--lvm-command", str(&o.lvm_command)},
      {"--device-probe", str(&o.device_probe)},
      {"--socket", str(&o.socket_path)},
      {"--resync",
       [&o](const std::string& v) -> Result<void> {
         double s = 0;
         // !(in range) also refuses NaN.
         if (!parseDouble(v, &s) || !(s >= kMinResync && s <= kMaxResync))
           return usageError("invalid value \"" + v +
                             "\" for --resync: want seconds from 0.5 to 86400");
         o.resync_seconds = s;
         return {};
       }},
      {"--dns-trace", oneOf(&o.dns_trace, {"auto", "on", "off"}, "--dns-trace")},
      {"--dns-netns",
       [&o](const std::string& v) -> Result<void> {
         o.dns_netns.push_back(v);
         return {};
       }},
      {"--dns-ring-kib",
       [&o](const std::string& v) -> Result<void> {
         char* end = nullptr;
         const unsigned long long n = std::strtoull(v.c_str(), &end, 10);
         if (v.empty() || v[0] < '0' || v[0] > '9' || !end || *end != '\0' || n < 16 || n > 65536 ||
             (n & (n - 1)) != 0)
           return usageError("invalid value \"" + v +
                             "\" for --dns-ring-kib: want a power of two from 16 to 65536");
         o.dns_ring_kib = static_cast<std::size_t>(n);
         return {};
       }},
      {"--log-level", oneOf(&o.log_level, {"debug", "info", "warn", "error"}, "--log-level")},
      {"--runbook-base-url", str(&o.runbook_base_url)},
      {"--vmi", str(&o.vmi)},
      {"--api", str(&o.api)},
  };
}

}  // namespace

Result<Options> parseOptions(int argc, char** argv) {
  Options o;
  for (auto [var, dst] :
       {std::pair{"NODEGATE_HOST_ROOT", &o.host_root}, std::pair{"NODEGATE_CONFIG", &o.config_path},
        std::pair{"NODEGATE_LVM_COMMAND", &o.lvm_command},
        std::pair{"NODEGATE_RUNBOOK_BASE_URL", &o.runbook_base_url},
        std::pair{"NODEGATE_DEVICE_PROBE", &o.device_probe}})
    if (const char* v = std::getenv(var); v && *v) *dst = v;
  const std::map<std::string, Setter> valued = valuedFlags(o);
  std::map<std::string, bool*> boolean = {{"--taint", &o.taint}, {"--follow", &o.follow}};

  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      o.command = "help";
      return o;
    }
    if (a.rfind("--", 0) == 0) {
      std::string name = a, value;
      bool has_value = false;
      if (auto eq = a.find('='); eq != std::string::npos) {
        name = a.substr(0, eq);
        value = a.substr(eq + 1);
        has_value = true;
      }
      if (auto b = boolean.find(name); b != boolean.end()) {
        if (has_value) {
          if (value != "true" && value != "false")
            return usageError(name + " takes no value (or =true/=false)");
          *b->second = value == "true";
        } else {
          *b->second = true;
        }
        continue;
      }
      auto s = valued.find(name);
      if (s == valued.end()) return usageError("unknown flag " + name);
      if (!has_value) {
        if (i + 1 >= argc) return usageError(name + " needs a value");
        value = argv[++i];
      }
      if (auto r = s->second(value); !r) return r.error();
      continue;
    }
    if (o.command.empty())
      o.command = a;
    else
      o.args.push_back(a);
  }
  if (o.command.empty()) return usageError("no command given");
  if (o.command != "check" && o.command != "agent" && o.command != "device-probe" &&
      o.command != "dns" && o.command != "version" && o.command != "help")
    return usageError("unknown command \"" + o.command + "\"");
  // Label syntax is checked here, not by the API server: a 422 on every write would leave the
  // agent running, healthy-looking and publishing nothing.
  if (auto r = kube::checkLabelFlags(o.prefix, o.gateLabel()); !r) return r.error();
  if (o.node_name.empty()) {
    if (const char* env = std::getenv("NODE_NAME"); env && *env) {
      o.node_name = env;
    } else {
      char host[256] = {};
      if (::gethostname(host, sizeof host - 1) == 0) o.node_name = host;
    }
  }
  return o;
}

Result<Config> buildConfig(const Options& opts) {
  Config cfg = defaultConfig();
  if (!opts.config_path.empty()) {
    auto loaded = loadConfig(opts.config_path, configSchema());
    if (!loaded) return loaded.error();
    cfg = std::move(loaded).value();
  }
  // A flag beats the file: the chart passes --lvm-command, users may keep a shared config.
  if (opts.lvm_command != "lvm" || cfg.text(kLvmCommandSetting).empty())
    cfg.set(kLvmCommandSetting.section, kLvmCommandSetting.key, opts.lvm_command);
  return cfg;
}

}  // namespace nodegate
