#include "kube/pod_source.h"

#include <random>

#include "nodegate/log.h"
#include "publish/kube/node_cache.h"

namespace nodegate::kube {
namespace {

using nlohmann::json;
using SteadyClock = std::chrono::steady_clock;

// 100 pages of 500: far past any node (kubelet's max-pods is 110 by default, rarely above 500);
// a server whose continue tokens never end must not hold the source forever.
constexpr std::size_t kMaxPages = 100;
constexpr std::size_t kMaxPods = 10000;

std::string rbacHint(long code) {
  return code == 401 || code == 403
             ? " (the agent needs list and watch on pods: chart value rbac.readPods)"
             : "";
}

}  // namespace

double PodSource::retryWait(const HttpResponse& r) {
  // RBAC is not transient: asking again at the backoff's pace would only add 403s to the budget.
  if (r.code == 401 || r.code == 403) return o_.forbidden_retry_s;
  if (r.retry_after && (r.code == 429 || r.code == 503)) return std::min(*r.retry_after, 300.0);
  return backoff_.next();
}

PodSource::PodSource(std::shared_ptr<Connection> connection, PodSourceOptions options)
    : o_(std::move(options)),
      conn_(std::move(connection)),
      api_(*conn_, stop_),
      backoff_(0.5, 30, o_.seed ? o_.seed : std::random_device{}()),
      rng_seed_(o_.seed ? o_.seed ^ 0x5bd1e995ULL : std::random_device{}()) {
  if (o_.start_thread) thread_ = std::thread([this] { loop(); });
}

PodSource::~PodSource() {
  stop_.stop();
  if (thread_.joinable()) thread_.join();
}

PodView PodSource::view() const {
  std::lock_guard lk(mu_);
  return ledger_.view(complete_, why_);
}

HandlerView PodSource::handlers() const {
  std::lock_guard lk(mu_);
  return {complete_, why_, ledger_.handlers()};
}

VmiDnsConfigs PodSource::vmiDns() const {
  std::lock_guard lk(mu_);
  VmiDnsConfigs c;
  c.complete = complete_;
  c.why = why_;
  c.vmis = ledger_.vmiDns();
  return c;
}

int PodSource::subscribe(Listener listener) {
  std::lock_guard lk(listeners_mu_);
  listeners_[next_id_] = std::move(listener);
  return next_id_++;
}

void PodSource::unsubscribe(int id) {
  std::lock_guard lk(listeners_mu_);
  listeners_.erase(id);
}

void PodSource::notify() {
  std::lock_guard lk(listeners_mu_);
  for (auto& [id, fn] : listeners_) fn();
}

void PodSource::setState(bool complete, const std::string& why) {
  {
    std::lock_guard lk(mu_);
    if (complete_ == complete && why_ == why) return;
    complete_ = complete;
    why_ = why;
  }
  if (complete)
    log::info("pod view complete", {{"node", o_.node_name}});
  else
    log::warn("pod view incomplete: running pods are protected as if any could need every label",
              {{"node", o_.node_name}, {"reason", why}});
  notify();
}

HttpResponse PodSource::listPage(const std::string& cont) {
  std::string path = "/api/v1/pods?fieldSelector=" + urlEncode("spec.nodeName=" + o_.node_name) +
                     "&limit=" + std::to_string(o_.page_size);
  if (!cont.empty()) path += "&continue=" + urlEncode(cont);
  return api_.request("list", "GET", path, {}, {}, o_.timeout_s);
}

bool PodSource::relist() {
  std::vector<json> items;
  std::string cont, rv;
  for (std::size_t pages = 0;; ++pages) {
    if (pages >= kMaxPages) {
      setState(false, "pod list: more than " + std::to_string(kMaxPages) + " pages of " +
                          std::to_string(o_.page_size));
      return false;
    }
    auto r = listPage(cont);
    if (r.code != 200) {
      // 410 on a continue token: the list is too old to finish; the caller starts over.
      setState(false, "failed to list pods: " + describe(r) + rbacHint(r.code));
      stop_.sleepFor(std::chrono::duration<double>(retryWait(r)));
      return false;
    }
    auto page = parsePodListPage(r.body);
    if (!page) {
      setState(false, page.error().message);
      stop_.sleepFor(std::chrono::duration<double>(backoff_.next()));
      return false;
    }
    if (rv.empty()) rv = page->resource_version;
    for (auto& item : page->items) items.push_back(std::move(item));
    if (items.size() > kMaxPods) {
      setState(false, "pod list: more than " + std::to_string(kMaxPods) + " pods on the node");
      stop_.sleepFor(std::chrono::duration<double>(backoff_.next()));
      return false;
    }
    if (page->continue_token.empty()) break;
    cont = page->continue_token;
  }
  {
    std::lock_guard lk(mu_);
    ledger_.replace(items);
  }
  rv_ = rv;
  log::debug(
      "listed pods",
      {{"node", o_.node_name}, {"pods", std::to_string(items.size())}, {"resource_version", rv}});
  setState(true, "");
  notify();  // the list may have changed what the views show even if complete already
  return true;
}

void PodSource::loop() {
  std::mt19937_64 rng(rng_seed_);
  while (!stop_.stopped()) {
    if (rv_.empty() && !relist()) continue;
    const double timeout = static_cast<double>(static_cast<long long>(
        o_.watch_timeout_s * std::uniform_real_distribution<double>(1.0, 1.5)(rng)));
    if (!watchOnce(timeout)) rv_.clear();
  }
}

bool PodSource::watchOnce(double timeout_s) {
  const std::string path =
      "/api/v1/pods?fieldSelector=" + urlEncode("spec.nodeName=" + o_.node_name) +
      "&watch=true&allowWatchBookmarks=true&resourceVersion=" + urlEncode(rv_) +
      "&timeoutSeconds=" + std::to_string(static_cast<long long>(timeout_s));
  bool relist = false, failed_event = false;
  const auto started = SteadyClock::now();
  std::size_t lines = 0;
  auto r = api_.stream(
      path,
      [&](std::string_view line) {
        auto ev = parseObject(line);
        if (!ev || !ev->contains("type") || !ev->contains("object")) return true;
        // The watch is established: whatever a failure had hidden is being delivered again.
        if (lines++ == 0) setState(true, "");
        const std::string type = ev->value("type", "");
        const json& obj = (*ev)["object"];
        if (type == "ERROR") {
          const int code = obj.is_object() ? obj.value("code", 0) : 0;
          if (code == 410 || code == 504)
            relist = true;
          else
            failed_event = true;
          return false;
        }
        if (auto v = rvOf(obj); !v.empty() && newerRv(v, rv_)) rv_ = v;
        if (type == "BOOKMARK") return true;
        bool c;
        {
          std::lock_guard lk(mu_);
          c = ledger_.apply(type, obj);
        }
        if (c) notify();
        return true;
      },
      timeout_s + 30);
  if (stop_.stopped()) return true;
  if (relist || r.code == 410 || r.code == 504) {
    log::info("pod watch: resourceVersion gone or ahead of the server, relisting",
              {{"node", o_.node_name}, {"resource_version", rv_}, {"error", describe(r)}});
    return false;
  }
  // A watch that ends at once with nothing sent is a server in trouble, not a quiet node.
  const bool short_lived = lines == 0 && SteadyClock::now() - started < std::chrono::seconds(1);
  if (r.code == 200 && !failed_event && !short_lived) {
    backoff_.reset();
    return true;
  }
  if (r.code == 200 && !failed_event) {
    stop_.sleepFor(std::chrono::duration<double>(backoff_.next()));
    return true;
  }
  // Until a watch is established again, a pod bound meanwhile would not be seen.
  setState(false, "pod watch failed: " + describe(r) + rbacHint(r.code));
  stop_.sleepFor(std::chrono::duration<double>(retryWait(r)));
  return r.code != 401 &&
         r.code != 403;  // a pod watch denied after a list was allowed: list again, to be sure
}

}  // namespace nodegate::kube
