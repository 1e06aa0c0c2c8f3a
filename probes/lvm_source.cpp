#include "lvm_source.h"

#include <string.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#include "text.h"

namespace nodegate {
namespace {

// Whether execvp would find prog: a name with a '/' as it is, else in one of $PATH's entries.
bool programInstalled(const std::string& prog) {
  if (prog.find('/') != std::string::npos) return ::access(prog.c_str(), X_OK) == 0;
  const char* env = std::getenv("PATH");
  std::string_view dirs = env && *env ? env : "/bin:/usr/bin";  // execvp's default
  for (;;) {
    const auto colon = dirs.find(':');
    std::string dir(dirs.substr(0, colon));
    if (::access(((dir.empty() ? "." : dir) + "/" + prog).c_str(), X_OK) == 0) return true;
    if (colon == std::string_view::npos) return false;
    dirs.remove_prefix(colon + 1);
  }
}

Result<std::vector<std::string>> commandArgv(const Config& cfg) {
  auto argv = splitCommandLine(cfg.text(kLvmCommandSetting));
  if (!argv) return argv.error();
  if (argv->empty()) return Error{EINVAL, "failed to run lvm: the lvm command is empty"};
  return argv;
}

std::string describeScan(const LvmLabelScan& scan) {
  std::string out = std::to_string(scan.scanned) + " block devices read";
  if (scan.empty > 0) out += " (" + std::to_string(scan.empty) + " of size 0 skipped)";
  if (!scan.denied.empty()) {
    out += "; open refused (EPERM, the device cgroup) for";
    for (const auto& d : scan.denied) out += " " + d;
    out += ", as it is for an lvm started from here";
  }
  if (!scan.error.empty()) return out + "; then stopped: " + scan.error + "; lvm decides";
  if (!scan.labelled.empty()) return out + "; " + scan.labelled.front() + " carries an LVM2 label";
  return out + "; none carries an LVM2 label";
}

}  // namespace

std::string describeExit(const ExecResult& run) {
  if (run.exit_code >= 0) return "exit code " + std::to_string(run.exit_code);
  if (run.signal <= 0) return "killed by a signal";
  const char* abbrev = ::sigabbrev_np(run.signal);
  return abbrev ? std::string("killed by SIG") + abbrev
                : "killed by signal " + std::to_string(run.signal);
}

Result<LvmPrelude> LocalLvmAccess::prepare(const HostRoot* host, const Config& cfg) {
  auto argv = commandArgv(cfg);
  if (!argv) return argv.error();
  LvmPrelude p;
  p.command = cfg.text(kLvmCommandSetting);
  p.installed = programInstalled(argv->front());
  // Without the program there is nothing the scan could change ("lvm is not installed").
  if (host && device_ && p.installed) p.scan = scanLvmLabels(*host, *device_);
  return p;
}

Result<ExecResult> LocalLvmAccess::fullreport(const Config& cfg, std::chrono::milliseconds timeout,
                                              std::size_t max_output) {
  auto argv = commandArgv(cfg);
  if (!argv) return argv.error();
  return exec_->run(lvmFullreportArgs(*argv), timeout, max_output);
}

std::shared_ptr<const LvmFetch> LvmReportSource::get(const Config& cfg,
                                                     std::chrono::milliseconds max_age) {
  return load(nullptr, cfg, max_age);
}

std::shared_ptr<const LvmFetch> LvmReportSource::get(const HostRoot& host, const Config& cfg,
                                                     std::chrono::milliseconds max_age) {
  return load(&host, cfg, max_age);
}

std::shared_ptr<const LvmFetch> LvmReportSource::load(const HostRoot* host, const Config& cfg,
                                                      std::chrono::milliseconds max_age) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto now = std::chrono::steady_clock::now();
  const std::string key = cfg.text(kLvmCommandSetting);
  if (last_ && max_age.count() > 0 && last_key_ == key && now - last_->at <= max_age) return last_;

  auto fetch = std::make_shared<LvmFetch>();
  fetch->command = key;
  auto done = [&]() {
    fetch->at = std::chrono::steady_clock::now();
    last_ = fetch;
    last_key_ = key;
    return last_;
  };
  auto prelude = access_->prepare(host, cfg);
  if (!prelude) {
    fetch->failure = access_->failureKind();
    fetch->error = prelude.error().message;
    return done();
  }
  fetch->command = prelude->command;
  if (prelude->scan) {
    const LvmLabelScan& scan = *prelude->scan;
    fetch->label_scan = describeScan(scan);
    fetch->refused = scan.denied;
    // A managed VG or a missing lvm changes what the probe says about an LVM-less host
    // (VolumeGroupMissing, NoLocalLvm), so only the plain case may skip lvm. Refused devices do
    // not make lvm worth running: it is refused them too.
    if (scan.noLabels() && cfg.text(kLvmVolumeGroupSetting).empty()) {
      fetch->lvm_skipped = true;
      return done();
    }
  }
  const auto timeout = std::chrono::milliseconds(
      static_cast<long long>(std::max(0.1, cfg.probeTimeout(kLvmCheck)) * 1000));
  const auto max_output = static_cast<std::size_t>(cfg.number(kLvmMaxOutputSetting));
  auto run = access_->fullreport(cfg, timeout, max_output);
  if (!run) {
    fetch->failure = access_->failureKind();
    fetch->error = run.error().message;
    return done();
  }
  interpret(*run, timeout, max_output, fetch.get());
  return done();
}

void LvmReportSource::interpret(const ExecResult& run, std::chrono::milliseconds timeout,
                                std::size_t max_output, LvmFetch* fetch) {
  // Real lvm writes its warnings to stderr; keep them as evidence (missing PV uuids).
  std::vector<std::string> warnings;
  collectLvmWarnings(run.err, &warnings);
  auto stderr_tail = [&]() {
    std::string_view e = trim(run.err);
    if (e.size() > 200) e = e.substr(e.size() - 200);
    return e.empty() ? std::string("no error output") : std::string(e);
  };
  const std::string& command = fetch->command;
  if (run.timed_out) {
    fetch->failure = LvmRunFailure::TimedOut;
    fetch->error = "failed to run " + command + ": no answer within " +
                   std::to_string(timeout.count()) + " ms (killed)";
  } else if (run.truncated) {
    fetch->failure = LvmRunFailure::Unparsable;
    fetch->error = "failed to read lvm report: output exceeded " + std::to_string(max_output) +
                   " bytes (killed)";
  } else if (run.exit_code == 127 && trim(run.out).empty()) {
    // 127 is what both our exec and nsenter/env return when the program does not exist.
    fetch->failure = LvmRunFailure::NotFound;
    fetch->error = "failed to run " + command + ": command not found (" + stderr_tail() + ")";
  } else if (auto parsed = parseLvmReport(run.out); !parsed) {
    const bool ok = run.exit_code == 0;
    fetch->failure = ok ? LvmRunFailure::Unparsable : LvmRunFailure::Failed;
    fetch->error =
        ok ? parsed.error().message
           : "failed to run " + command + ": " + describeExit(run) + ": " + stderr_tail();
  } else {
    // A failed run with a parsable report still describes every VG lvm could read (it exits
    // 5 when one VG of several is unreadable; as a non-root user it prints an empty report and
    // exits 5): kept, but marked so the probe never calls it healthy.
    fetch->report = std::move(*parsed);
    if (run.exit_code != 0) fetch->run_error = describeExit(run) + ": " + stderr_tail();
  }
  for (auto& w : warnings)
    if (fetch->report.warnings.size() < kMaxLvmWarnings)
      fetch->report.warnings.push_back(std::move(w));
}

}  // namespace nodegate
