// The credentials of the one API server connection, loaded once and rotated in place: bound
// service-account tokens are re-read, CA bundles reloaded when the file changes.
#pragma once

#include <chrono>
#include <mutex>
#include <string>
#include <string_view>

#include "kube/client_config.h"
#include "nodegate/result.h"

namespace nodegate::kube {

// Checks that text is a PEM bundle of one or more X.509 certificates (well-formed blocks whose
// base64 decodes to a DER sequence): a half-written or garbage CA file must be refused before
// it replaces a working one. Returns the number of certificates.
Result<int> checkCaBundle(std::string_view pem);

// Shared by every thread of the process that talks to the API (thread-safe). The token file is
// re-read when older than token_max_age or after a 401; the CA file whenever its inode, mtime
// or size changes (checked before every request: one stat). A CA file that does not hold a
// certificate bundle is refused with an error and the last good bundle stays in use, so a
// rotation caught half-way breaks nothing that still works with the old CA.
class Credentials {
 public:
  explicit Credentials(ClientConfig cfg,
                       std::chrono::seconds token_max_age = std::chrono::seconds(60));
  const ClientConfig& config() const { return cfg_; }
  std::string token();
  // The CA bundle to verify the server with ("" = none configured, or none valid yet).
  std::string caPem();
  // Why the CA file's current content is not in use ("" when it is).
  std::string caError();
  void invalidateToken();

 private:
  ClientConfig cfg_;
  std::chrono::seconds token_max_age_;
  std::mutex mu_;
  std::string token_;
  std::chrono::steady_clock::time_point token_read_{};
  bool token_valid_ = false;
  std::string ca_;
  std::string ca_error_;
  long long ca_mtime_ns_ = -1;
  long long ca_size_ = -1;
  unsigned long long ca_ino_ = 0;
};

}  // namespace nodegate::kube
