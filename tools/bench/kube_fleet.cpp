// kube_fleet: many simulated nodegate agents in one process, each a real KubePublisher (same
// client, rate limiter, watch and patch code as the agent), against one API server.
// Driven by tools/bench/kube-fleet.py, which reads the server's request log for the figures.
//
//   kube_fleet --kubeconfig FILE --agents N [--first I] [--duration S] [--resync S]
//              [--flip-every S] [--flip-after S] [--heartbeat S] [--startup-jitter S] [--qps Q
//              --burst B]
//
// Agent i publishes node "fleet-<i>". Every --resync seconds each agent publishes its
// (unchanged) snapshot again, as the agent loop does after each cycle. With --flip-every, one
// agent at a time flips its kvm check and prints "flip <node> <unix-time>" so the script can
// pair it with the PATCH the server saw.
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <prometheus/registry.h>

#include "kube/kubeconfig.h"
#include "nodegate/log.h"
#include "publish/kube/publisher.h"

using namespace nodegate;
using namespace nodegate::kube;

namespace {

Snapshot snapshot(bool kvm_ok) {
  Snapshot s;
  auto add = [&](const char* name, Status st, const char* reason,
                 std::map<std::string, std::string> labels) {
    CheckState c;
    c.result = makeResult(name, st, reason, std::string(name) + " " + std::string(toString(st)));
    c.result.labels = std::move(labels);
    s.checks.push_back(std::move(c));
  };
  add("cpu-virt", Status::Pass, "VmxPresent", {{"cpu-virt", "vmx"}});
  add("kvm-device", kvm_ok ? Status::Pass : Status::Fail, kvm_ok ? "Ok" : "DeviceMissing",
      {{"kvm", kvm_ok ? "true" : "false"}});
  add("vhost-net", Status::Pass, "Ok", {{"vhost-net", "true"}});
  add("tun", Status::Pass, "Ok", {{"tun", "true"}});
  add("kernel-modules", Status::Pass, "Ok", {});
  add("time-sync", Status::Pass, "Ok", {});
  s.gate_open = kvm_ok;
  s.complete = true;
  return s;
}

double arg(int argc, char** argv, const char* name, double fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return std::atof(argv[i + 1]);
  return fallback;
}

std::string sarg(int argc, char** argv, const char* name) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return argv[i + 1];
  return {};
}

}  // namespace

int main(int argc, char** argv) {
  std::string kubeconfig = sarg(argc, argv, "--kubeconfig");
  int agents = static_cast<int>(arg(argc, argv, "--agents", 100));
  int first = static_cast<int>(arg(argc, argv, "--first", 0));
  double duration = arg(argc, argv, "--duration", 60);
  double resync = arg(argc, argv, "--resync", 60);
  double flip_every = arg(argc, argv, "--flip-every", 0);
  if (kubeconfig.empty() || agents <= 0) {
    std::cerr << "usage: kube_fleet --kubeconfig FILE --agents N [--first I] [--duration S] ...\n";
    return 2;
  }
  auto client = loadKubeconfig(kubeconfig);
  if (!client) {
    std::cerr << "kube_fleet: " << client.error().message << "\n";
    return 1;
  }
  log::setLevel(log::Level::Error);
  prometheus::Registry registry;
  std::vector<std::unique_ptr<Publisher>> pubs;
  std::vector<bool> state(static_cast<std::size_t>(agents), true);
  for (int i = 0; i < agents; ++i) {
    PublisherOptions o;
    o.publish.node_name = "fleet-" + std::to_string(first + i);
    o.publish.required = {"cpu-virt", "kvm-device", "tun", "kernel-modules"};
    o.heartbeat = std::chrono::seconds(static_cast<long long>(arg(argc, argv, "--heartbeat", 300)));
    o.startup_jitter_s = arg(argc, argv, "--startup-jitter", 2);
    o.watch_timeout_s = arg(argc, argv, "--watch-timeout", 300);
    // Each simulated agent is a process of its own: one connection (and budget) each.
    ConnectionSettings cs{arg(argc, argv, "--qps", 5), arg(argc, argv, "--burst", 10)};
    auto conn = std::make_shared<Connection>(*client, cs, registry);
    // And its pod watch, as the agent runs one on the same connection.
    PodSourceOptions po;
    po.node_name = o.publish.node_name;
    po.watch_timeout_s = o.watch_timeout_s;
    pubs.push_back(startPublisher(conn, o, std::make_shared<PodSource>(conn, po)));
    pubs.back()->publish(snapshot(true));
  }
  std::printf("started %d agents\n", agents);
  std::fflush(stdout);

  auto start = std::chrono::steady_clock::now();
  auto next_resync = start + std::chrono::duration<double>(resync);
  // Flips wait for --flip-after so the restart burst is measured without them.
  double flip_after = arg(argc, argv, "--flip-after", 0);
  auto next_flip =
      start + std::chrono::duration<double>(flip_every > 0 ? flip_after + flip_every : 1e9);
  int flip_index = 0;
  while (std::chrono::steady_clock::now() - start < std::chrono::duration<double>(duration)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    auto now = std::chrono::steady_clock::now();
    if (now >= next_resync) {
      for (int i = 0; i < agents; ++i)
        pubs[static_cast<std::size_t>(i)]->publish(snapshot(state[static_cast<std::size_t>(i)]));
      next_resync += std::chrono::duration<double>(resync);
    }
    if (now >= next_flip) {
      auto idx = static_cast<std::size_t>(flip_index++ % agents);
      state[idx] = !state[idx];
      double t = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
                     .count();
      pubs[idx]->publish(snapshot(state[idx]));
      std::printf("flip fleet-%d %.6f\n", first + static_cast<int>(idx), t);
      std::fflush(stdout);
      next_flip += std::chrono::duration<double>(flip_every);
    }
  }
  double total = 0;
  for (const auto& f : registry.Collect())
    if (f.name == "nodegate_kube_requests_total")
      for (const auto& m : f.metric) {
        std::string labels;
        for (const auto& l : m.label) labels += l.name + "=" + l.value + " ";
        std::printf("requests %s%.0f\n", labels.c_str(), m.counter.value);
        total += m.counter.value;
      }
  std::printf("requests_total %.0f\n", total);
  // Shutdown writes nothing, but each publisher's watch notices the stop only at curl's next
  // progress callback (about a second): stopping them one after another took minutes for a few
  // hundred agents, so stop them all at once.
  std::vector<std::thread> stoppers;
  stoppers.reserve(pubs.size());
  for (auto& p : pubs) stoppers.emplace_back([&p] { p.reset(); });
  for (auto& t : stoppers) t.join();
  return 0;
}
