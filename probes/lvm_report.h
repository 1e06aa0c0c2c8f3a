// The `lvm fullreport` JSON report: parser, lv_attr/lv_health_status decoding, the command line
// splitter and the fullreport argv. The collector that runs lvm is lvm_source.h.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "nodegate/result.h"

namespace nodegate {

// lv_health_status as lvm prints it (lib/report/report.c). Thin-pool states are the ones that
// pause every VM on the pool; lvm-localpv's exporter maps them to "undefined".
enum class LvHealth {
  Ok,                // ""
  Partial,           // "partial": a PV under the LV is missing
  RefreshNeeded,     // "refresh needed": raid image failed and came back
  MismatchesExist,   // "mismatches exist": raid scrub found inconsistent copies
  WriteMostly,       // "writemostly": a raid1 leg mode, not a problem
  Failed,            // "failed": thin pool or cache failed
  OutOfData,         // "out_of_data": thin pool data space exhausted
  MetadataReadOnly,  // "metadata_read_only": thin pool metadata switched read-only
  Error,             // "error": writecache error
  Unknown,           // "unknown": lvm could not ask device-mapper
  Other,             // any other text (kept verbatim in LvmLv::health_text)
};

std::string_view toString(LvHealth h);
LvHealth parseLvHealth(std::string_view text);
// Ok and WriteMostly are healthy; Unknown is undecided; everything else is a problem.
bool isProblem(LvHealth h);

// The ten lv_attr characters, decoded (lvs(8) "lv_attr bits"). Unknown letters keep their raw
// character so nothing is lost; '-' means "not set" everywhere.
struct LvAttr {
  char type = '-';               // 1: C m M o O r R s S p v i I l c V t T d D e g '-'
  char permission = '-';         // 2: w r R ('-' when the LV is inactive and lvm cannot tell)
  char allocation = '-';         // 3: a c i l n (upper case: locked against allocation changes)
  bool fixed_minor = false;      // 4: m
  char state = '-';              // 5: a h s I S m M d i c C X
  char open = '-';               // 6: o X
  char target = '-';             // 7: C m r s t u v d g
  bool zero = false;             // 8: z
  char health = '-';             // 9: p X r m w F D M E
  bool skip_activation = false;  // 10: k
  bool valid = false;            // the text had exactly ten characters

  bool isThinPool() const { return type == 't'; }
  bool isThinVolume() const { return type == 'V'; }
  bool isSnapshot() const { return type == 's' || type == 'S'; }
  bool active() const { return state == 'a'; }
  bool stateUnknown() const { return state == 'X' || open == 'X'; }
  // Read-only only when lvm says so: an inactive writable LV shows '-' or 'w', never 'r'.
  bool readOnly() const { return permission == 'r' || permission == 'R'; }
};

LvAttr parseLvAttr(std::string_view text);
// Human words for the set bits, for evidence ("thin pool, active, open, out of data space").
std::string describeLvAttr(const LvAttr& a);

struct LvmVg {
  std::string name, uuid, attr;
  std::optional<std::uint64_t> size, free;
  bool partial = false;
  std::uint64_t missing_pv_count = 0;
  std::uint64_t pv_count = 0;
};

struct LvmPv {
  std::string vg, name, uuid, attr;
  bool missing = false;
  std::optional<std::uint64_t> size;
};

struct LvmLv {
  std::string vg, name, full_name, uuid;
  std::string attr_text;
  LvAttr attr;
  LvHealth health = LvHealth::Ok;
  std::string health_text;
  std::string permissions;  // lv_permissions: "writeable", "read-only", "unknown" (inactive)
  std::string active;       // lv_active: "active", "1", "", "unknown"
  std::optional<std::uint64_t> size;
  std::optional<double> data_percent, metadata_percent;
  std::string pool_lv, origin, when_full, layout, role, path, dm_path;

  // Hidden LVs are lvm's own sub-volumes ([pool_tdata], [lvol0_pmspare]).
  bool hidden() const { return !name.empty() && name.front() == '['; }
  // lv_health_status, or lv_attr's ninth character when the report left the status out.
  LvHealth effectiveHealth() const;
};

struct LvmLogEntry {
  std::string type, context, object, message;
  std::int64_t ret_code = 0;
};

struct LvmReport {
  std::vector<LvmVg> vgs;
  std::vector<LvmPv> pvs;
  std::vector<LvmLv> lvs;
  std::vector<LvmLogEntry> log;
  std::vector<std::string> warnings;  // stray "WARNING:" lines found around or inside the JSON
  std::string format;                 // "json" (all strings) or "json_std" (numbers, null)

  const LvmLv* findLv(std::string_view vg, std::string_view name) const;
};

// Parses `lvm fullreport --reportformat json|json_std` output. Accepts both value forms, a "log"
// section, sizes in bytes or in lvm's human units ("<1.47g"), and WARNING lines lvm interleaves
// on stdout. Anything that is not such a report is an error naming what was wrong.
Result<LvmReport> parseLvmReport(std::string_view text);

// Splits a command line the way a POSIX shell would split words (single and double quotes,
// backslash escapes), without expanding anything. An unterminated quote is an error.
Result<std::vector<std::string>> splitCommandLine(std::string_view line);

// Appends lvm's "WARNING:" lines in text (its stderr) to warnings, up to kMaxLvmWarnings in all.
inline constexpr std::size_t kMaxLvmWarnings = 20;
void collectLvmWarnings(std::string_view text, std::vector<std::string>* warnings);

// The argv of one fullreport run: the configured command followed by the report options.
std::vector<std::string> lvmFullreportArgs(std::vector<std::string> command);

}  // namespace nodegate
