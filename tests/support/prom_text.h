#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace konn::testsupport {

// One sample of a Prometheus text exposition (format 0.0.4).
struct PromSample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

struct PromFamily {
  std::string name;
  std::string type;  // counter, gauge, histogram, summary, untyped
  std::string help;
  std::vector<PromSample> samples;
};

struct PromParse {
  std::map<std::string, PromFamily> families;
  std::vector<std::string> errors;  // empty: the text is valid

  // The value of the sample `name` with exactly `labels`, if present.
  std::optional<double> value(const std::string& name,
                              const std::map<std::string, std::string>& labels = {}) const;
  // The value of `series` written as it is exposed: `name` or `name{label="value",...}` (labels
  // in any order), if present.
  std::optional<double> value_of(const std::string& series) const;
};

// A strict parser of the text format as Prometheus 2 reads it: metric and label name syntax,
// quoted label values with \\ \" \n escapes only, float values (NaN, ±Inf), optional integer
// timestamps; at most one HELP and one TYPE per family, TYPE before its samples, a family's
// samples contiguous, no duplicate series; counters non-negative; histograms with `le` on every
// bucket, a `+Inf` bucket equal to `_count`, cumulative bucket counts, and `_sum`. The text
// must end with a newline.
PromParse parse_prometheus_text(const std::string& text);

}  // namespace konn::testsupport
