// The pods bound to this node, from the API: a list (fieldSelector=spec.nodeName=<node>, in
// pages), then a watch from the list's resourceVersion (bookmarks on), into a PodLedger. The
// gate needs it to keep running VMs admitted (publish/kube/gate_hold.h); kubevirt-node needs
// the virt-handler pods.
//
// Requests go through the process's shared Connection, so they count in kube.qps/kube.burst.
// A 410 (our version left the server's window), a 504 "too large resource version" (etcd
// restored from a backup: the server is behind us) or a DELETED-of-everything restart relists.
// Failures back off (Retry-After honoured). Until the list is done, and from a failure until the
// next list or watch is established, the view is incomplete with the reason, so a caller never
// mistakes "could not see" for "no pods": 401/403 (no RBAC for pods) say so and are retried
// slowly, never read as an empty node.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kube/connection.h"
#include "kube/pod_ledger.h"

namespace nodegate::kube {

struct PodSourceOptions {
  std::string node_name;
  std::size_t page_size = 500;    // a node runs 110 pods by default, a few hundred at most
  double timeout_s = 20;          // per list request
  double watch_timeout_s = 300;   // each watch asks for this, jittered up to +50%
  double forbidden_retry_s = 60;  // kube.pod_forbidden_retry_seconds: 401/403 retried this rarely
  std::uint64_t seed = 0;         // 0: random
  bool start_thread = true;       // tests drive it themselves
};

// The virt-handler pods bound to this node, as kubevirt-node reads them, with the view's state.
struct HandlerView {
  bool complete = false;  // the pods are listed and watched
  std::string why;        // why not
  std::vector<VirtHandlerPod> handlers;
  bool operator==(const HandlerView&) const = default;
};

class PodSource {
 public:
  // `connection` must outlive the source.
  PodSource(std::shared_ptr<Connection> connection, PodSourceOptions options);
  ~PodSource();  // stops and joins
  PodSource(const PodSource&) = delete;
  PodSource& operator=(const PodSource&) = delete;

  PodView view() const;
  HandlerView handlers() const;
  // The launcher pods' DNS configuration, complete/why as in view().
  VmiDnsConfigs vmiDns() const;

  // Called (on the source's thread) after every change of the view: a pod added, changed in a
  // way the views show, removed, or the view turning complete or incomplete. Returns an id for
  // unsubscribe(), which waits for a call in progress to finish.
  using Listener = std::function<void()>;
  int subscribe(Listener listener);
  void unsubscribe(int id);

  // For tests: one list; false when it failed (the view says why).
  bool relist();

 private:
  void loop();
  // One watch from rv_; false: relist.
  bool watchOnce(double timeout_s);
  void setState(bool complete, const std::string& why);
  void notify();
  HttpResponse listPage(const std::string& cont);
  // How long to wait after a failed request.
  double retryWait(const HttpResponse& r);

  PodSourceOptions o_;
  std::shared_ptr<Connection> conn_;
  Stopper stop_;
  ApiClient api_;           // source thread only
  Backoff backoff_;         // source thread only
  std::string rv_;          // source thread only: where the watch resumes
  std::uint64_t rng_seed_;  // source thread only

  mutable std::mutex mu_;
  PodLedger ledger_;
  bool complete_ = false;
  std::string why_ = "pods not listed yet";

  std::mutex listeners_mu_;
  std::map<int, Listener> listeners_;
  int next_id_ = 1;
  std::thread thread_;
};

}  // namespace nodegate::kube
