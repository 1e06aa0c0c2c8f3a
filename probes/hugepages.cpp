#include "hugepages.h"

#include <algorithm>
#include <filesystem>

#include "nodegate/host_root.h"
#include "text.h"

namespace nodegate {

std::optional<std::uint64_t> parseHugepageDirName(std::string_view name) {
  constexpr std::string_view kPrefix = "hugepages-", kSuffix = "kB";
  if (name.size() <= kPrefix.size() + kSuffix.size() || name.substr(0, kPrefix.size()) != kPrefix ||
      name.substr(name.size() - kSuffix.size()) != kSuffix)
    return std::nullopt;
  auto v = parseU64(name.substr(kPrefix.size(), name.size() - kPrefix.size() - kSuffix.size()));
  if (!v || *v == 0) return std::nullopt;
  return v;
}

CheckResult evaluateHugepages(const HugepagesObservation& o) {
  const HugepagePool* want = nullptr;
  for (const auto& p : o.pools)
    if (p.size_kb == o.want_size_kb) want = &p;
  const auto size = std::to_string(o.want_size_kb) + "kB";
  CheckResult r;
  if (!o.error.empty()) {
    r = makeResult(kHugepagesCheck, Status::Unknown, "HugepagesUnreadable", o.error,
                   "mount the host's /sys read-only into the agent (--host-root, --path.sysfs)");
    r.evidence.push_back(
        {"policy checks.hugepages.min_free", std::to_string(o.min_free) + " x " + size});
    return r;
  }
  if (o.min_free == 0) {
    r = makeResult(kHugepagesCheck, Status::Pass, o.readable ? "Reported" : "HugepagesUnsupported",
                   o.readable ? "huge pages reported; the policy asks for none"
                              : "the kernel shows no huge page pools; the policy asks for none");
  } else if (!o.readable) {
    r = makeResult(kHugepagesCheck, Status::Warn, "HugepagesUnsupported",
                   "policy asks for " + std::to_string(o.min_free) + " free " + size +
                       " pages but the kernel shows no huge page pools",
                   "enable CONFIG_HUGETLBFS, or check that the host's /sys is mounted");
  } else if (!want || want->free < o.min_free) {
    r = makeResult(kHugepagesCheck, Status::Warn, "NotEnoughFreeHugepages",
                   std::to_string(want ? want->free : 0) + " free " + size +
                       " pages, policy asks for " + std::to_string(o.min_free),
                   "reserve more: sysctl vm.nr_hugepages=N (default page size), or hugepagesz= "
                   "hugepages= on the kernel command line, or the pool's nr_hugepages in sysfs");
  } else {
    r = makeResult(kHugepagesCheck, Status::Pass, "EnoughFreeHugepages",
                   std::to_string(want->free) + " free " + size +
                       " pages (policy: " + std::to_string(o.min_free) + ")");
  }
  for (const auto& p : o.pools) {
    auto bytes = std::to_string(p.size_kb * 1024);
    r.evidence.push_back({"hugepages-" + std::to_string(p.size_kb) + "kB",
                          "total " + std::to_string(p.total) + ", free " + std::to_string(p.free) +
                              ", reserved " + std::to_string(p.reserved) + ", surplus " +
                              std::to_string(p.surplus)});
    const std::pair<const char*, std::uint64_t> states[] = {
        {"total", p.total}, {"free", p.free}, {"reserved", p.reserved}, {"surplus", p.surplus}};
    for (auto [state, value] : states)
      r.metrics.push_back({"nodegate_hugepages_pages",
                           "Huge pages per page size and state (total, free, reserved, surplus).",
                           {{"page_size_bytes", bytes}, {"state", state}},
                           static_cast<double>(value)});
  }
  if (o.pools.empty()) r.evidence.push_back({"sysfs kernel/mm/hugepages", "no pools"});
  r.evidence.push_back(
      {"policy checks.hugepages.min_free", std::to_string(o.min_free) + " x " + size});
  return r;
}

CheckResult HugepagesProbe::run(const ProbeContext& ctx) {
  HugepagesObservation o;
  double min_free = ctx.config.number(kHugepagesMinFreeSetting);
  double size_kb = ctx.config.number(kHugepagesPageSizeSetting);
  o.min_free = min_free > 0 ? static_cast<std::uint64_t>(min_free) : 0;
  o.want_size_kb = size_kb > 0 ? static_cast<std::uint64_t>(size_kb) : 2048;
  std::error_code ec;
  auto dir = ctx.host.sys("kernel/mm/hugepages");
  std::filesystem::directory_iterator it(dir, ec);
  o.readable = !ec;
  if (ec && ec != std::errc::no_such_file_or_directory) {
    o.error = "failed to list " + dir + ": " + ec.message();
  } else if (ec) {
    if (auto sys = sysfsReadable(ctx.host); !sys) o.error = sys.error().message;
  }
  for (; !ec && o.error.empty() && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    auto name = it->path().filename().string();
    auto kb = parseHugepageDirName(name);
    if (!kb) continue;
    HugepagePool p;
    p.size_kb = *kb;
    // A count that cannot be read is not zero pages.
    auto num = [&](const char* file) -> std::uint64_t {
      const std::string path = dir + "/" + name + "/" + file;
      auto v = readValue(path);
      auto n = v ? parseU64(*v) : std::nullopt;
      if (!n && o.error.empty())
        o.error = v ? path + " holds \"" + *v + "\", not a count" : v.error().message;
      return n.value_or(0);
    };
    p.total = num("nr_hugepages");
    p.free = num("free_hugepages");
    p.reserved = num("resv_hugepages");
    p.surplus = num("surplus_hugepages");
    o.pools.push_back(p);
  }
  if (ec && o.readable && o.error.empty()) o.error = "failed to list " + dir + ": " + ec.message();
  std::sort(o.pools.begin(), o.pools.end(),
            [](const HugepagePool& a, const HugepagePool& b) { return a.size_kb < b.size_kb; });
  return evaluateHugepages(o);
}

}  // namespace nodegate
