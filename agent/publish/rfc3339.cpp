#include "publish/rfc3339.h"

#include <cstdio>
#include <ctime>

namespace nodegate {

std::string formatRfc3339(std::chrono::system_clock::time_point t, int fraction_digits) {
  using namespace std::chrono;
  if (fraction_digits < 0) fraction_digits = 0;
  if (fraction_digits > 9) fraction_digits = 9;
  const auto ns = duration_cast<nanoseconds>(t.time_since_epoch()).count();
  long long secs = ns / 1000000000LL;
  long long frac = ns % 1000000000LL;
  if (frac < 0) {  // before 1970: floor, not truncation towards zero
    frac += 1000000000LL;
    secs -= 1;
  }
  std::time_t tt = static_cast<std::time_t>(secs);
  std::tm tm{};
  gmtime_r(&tt, &tm);
  char buf[64];
  int n = std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d", tm.tm_year + 1900,
                        tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
  std::string out(buf, static_cast<std::size_t>(n));
  if (fraction_digits > 0) {
    char digits[16];
    std::snprintf(digits, sizeof digits, "%09lld", frac);
    out += '.';
    out.append(digits, static_cast<std::size_t>(fraction_digits));
  }
  out += 'Z';
  return out;
}

}  // namespace nodegate
