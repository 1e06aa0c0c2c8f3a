#include "kube/credentials.h"

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cstring>

#include "kube/base64.h"
#include "nodegate/log.h"

namespace nodegate::kube {
namespace {

std::string trim(std::string s) {
  auto notspace = [](unsigned char c) { return !std::isspace(c); };
  s.erase(s.begin(), std::find_if(s.begin(), s.end(), notspace));
  s.erase(std::find_if(s.rbegin(), s.rend(), notspace).base(), s.end());
  return s;
}

}  // namespace

Result<int> checkCaBundle(std::string_view pem) {
  constexpr std::string_view kBegin = "-----BEGIN CERTIFICATE-----";
  constexpr std::string_view kEnd = "-----END CERTIFICATE-----";
  int count = 0;
  std::size_t pos = 0;
  while ((pos = pem.find(kBegin, pos)) != std::string_view::npos) {
    auto body = pos + kBegin.size();
    auto end = pem.find(kEnd, body);
    if (end == std::string_view::npos)
      return Error{EINVAL, "certificate " + std::to_string(count + 1) + " has no END line"};
    bool ok = false;
    std::string der = base64Decode(pem.substr(body, end - body), &ok);
    // Every X.509 certificate is a DER SEQUENCE (0x30) of a few hundred bytes at least.
    if (!ok || der.size() < 64 || static_cast<unsigned char>(der[0]) != 0x30)
      return Error{EINVAL, "certificate " + std::to_string(count + 1) + " is not valid base64 DER"};
    ++count;
    pos = end + kEnd.size();
  }
  if (count == 0) return Error{EINVAL, "no PEM certificate in it"};
  return count;
}

Credentials::Credentials(ClientConfig cfg, std::chrono::seconds token_max_age)
    : cfg_(std::move(cfg)), token_max_age_(token_max_age) {}

std::string Credentials::token() {
  if (cfg_.token_file.empty()) return cfg_.token;
  std::lock_guard lk(mu_);
  auto now = std::chrono::steady_clock::now();
  if (!token_valid_ || now - token_read_ >= token_max_age_) {
    auto t = readCredentialFile(cfg_.token_file, "token");
    if (t) {
      token_ = trim(*t);
      token_valid_ = true;
    } else {
      // Keep the last good token: the kubelet swaps the file atomically, a miss is transient.
      log::warn("failed to read service account token", {{"error", t.error().message}});
    }
    token_read_ = now;
  }
  return token_.empty() ? cfg_.token : token_;
}

void Credentials::invalidateToken() {
  std::lock_guard lk(mu_);
  token_valid_ = false;
}

std::string Credentials::caPem() {
  if (cfg_.ca_file.empty()) return cfg_.ca_pem;
  std::lock_guard lk(mu_);
  struct stat st {};
  if (::stat(cfg_.ca_file.c_str(), &st) != 0) {
    // Keep the last good bundle: the kubelet swaps the file atomically, a miss is transient.
    std::string why = "failed to read kubernetes ca " + cfg_.ca_file + ": " + std::strerror(errno);
    if (why != ca_error_) log::warn(why);
    ca_error_ = why;
    return ca_;
  }
  long long mtime = static_cast<long long>(st.st_mtim.tv_sec) * 1000000000LL + st.st_mtim.tv_nsec;
  auto ino = static_cast<unsigned long long>(st.st_ino);
  if (mtime == ca_mtime_ns_ && st.st_size == ca_size_ && ino == ca_ino_) return ca_;
  // Whatever the outcome, this version of the file is judged once, not on every request.
  ca_mtime_ns_ = mtime;
  ca_size_ = st.st_size;
  ca_ino_ = ino;
  auto pem = readCredentialFile(cfg_.ca_file, "kubernetes ca");
  Result<int> certs = pem ? checkCaBundle(*pem) : Result<int>(pem.error());
  if (!certs) {
    ca_error_ = "failed to load kubernetes ca " + cfg_.ca_file + ": " + certs.error().message;
    log::error(ca_error_, {{"action", ca_.empty() ? "no ca to verify the server with"
                                                  : "keeping the previous ca"}});
    return ca_;
  }
  if (!ca_.empty() && *pem != ca_)
    log::info("reloaded kubernetes ca",
              {{"file", cfg_.ca_file}, {"certificates", std::to_string(*certs)}});
  ca_ = *pem;
  ca_error_.clear();
  return ca_;
}

std::string Credentials::caError() {
  std::lock_guard lk(mu_);
  return ca_error_;
}

}  // namespace nodegate::kube
