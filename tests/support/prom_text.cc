#include "tests/support/prom_text.h"

#include <cctype>
#include <cmath>
#include <set>

namespace konn::testsupport {
namespace {

bool metric_name(const std::string& s) {
  if (s.empty()) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    bool ok = std::isalpha(static_cast<unsigned char>(c)) != 0 || c == '_' || c == ':' ||
              (i > 0 && std::isdigit(static_cast<unsigned char>(c)) != 0);
    if (!ok) return false;
  }
  return true;
}

bool label_name(const std::string& s) {
  if (s.empty() || s.find(':') != std::string::npos) return false;
  return metric_name(s);
}

std::optional<double> parse_value(const std::string& s) {
  if (s == "NaN") return std::nan("");
  if (s == "+Inf" || s == "Inf") return HUGE_VAL;
  if (s == "-Inf") return -HUGE_VAL;
  if (s.empty()) return std::nullopt;
  size_t used = 0;
  try {
    double v = std::stod(s, &used);
    if (used != s.size()) return std::nullopt;
    return v;
  } catch (...) {
    return std::nullopt;
  }
}

// The family a sample belongs to: histograms and summaries own name_bucket/_sum/_count.
std::string family_of(const std::string& name, const std::map<std::string, PromFamily>& families) {
  for (const char* suffix : {"_bucket", "_sum", "_count"}) {
    std::string sfx = suffix;
    if (name.size() > sfx.size() && name.compare(name.size() - sfx.size(), sfx.size(), sfx) == 0) {
      std::string base = name.substr(0, name.size() - sfx.size());
      auto it = families.find(base);
      if (it != families.end() &&
          (it->second.type == "histogram" || it->second.type == "summary")) {
        return base;
      }
    }
  }
  return name;
}

}  // namespace

std::optional<double> PromParse::value(const std::string& name,
                                       const std::map<std::string, std::string>& labels) const {
  auto it = families.find(family_of(name, families));
  if (it == families.end()) return std::nullopt;
  for (const auto& s : it->second.samples) {
    if (s.name == name && s.labels == labels) return s.value;
  }
  return std::nullopt;
}

std::optional<double> PromParse::value_of(const std::string& series) const {
  // The series is read by the same parser, as a sample line of its own.
  PromParse key = parse_prometheus_text(series + " 0\n");
  if (!key.errors.empty() || key.families.size() != 1) return std::nullopt;
  const auto& samples = key.families.begin()->second.samples;
  if (samples.size() != 1) return std::nullopt;
  return value(samples.front().name, samples.front().labels);
}

PromParse parse_prometheus_text(const std::string& text) {
  PromParse out;
  auto error = [&](size_t line, const std::string& what) {
    out.errors.push_back("line " + std::to_string(line) + ": " + what);
  };
  if (!text.empty() && text.back() != '\n') out.errors.push_back("text does not end with \\n");
  std::set<std::string> closed;  // families whose samples ended
  std::set<std::string> series;
  std::string current;
  size_t line_no = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    std::string line = text.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
    pos = nl == std::string::npos ? text.size() : nl + 1;
    ++line_no;
    if (line.empty()) continue;
    if (line[0] == '#') {
      // "# HELP name text" / "# TYPE name type"; other comments are allowed.
      if (line.rfind("# HELP ", 0) == 0 || line.rfind("# TYPE ", 0) == 0) {
        bool help = line[2] == 'H';
        std::string rest = line.substr(7);
        size_t sp = rest.find(' ');
        std::string name = rest.substr(0, sp);
        std::string arg = sp == std::string::npos ? "" : rest.substr(sp + 1);
        if (!metric_name(name)) {
          error(line_no, "bad metric name in " + line);
          continue;
        }
        auto& fam = out.families[name];
        fam.name = name;
        if (help) {
          if (!fam.help.empty()) error(line_no, "second HELP for " + name);
          fam.help = arg.empty() ? " " : arg;
        } else {
          static const std::set<std::string> types{"counter", "gauge", "histogram", "summary",
                                                   "untyped"};
          if (!fam.type.empty()) error(line_no, "second TYPE for " + name);
          if (types.count(arg) == 0) error(line_no, "unknown TYPE " + arg);
          if (!fam.samples.empty()) error(line_no, "TYPE after samples of " + name);
          fam.type = arg;
        }
      }
      continue;
    }
    // name{labels} value [timestamp]
    size_t i = 0;
    while (i < line.size() && line[i] != '{' && line[i] != ' ') ++i;
    PromSample sample;
    sample.name = line.substr(0, i);
    if (!metric_name(sample.name)) {
      error(line_no, "bad metric name \"" + sample.name + "\"");
      continue;
    }
    bool ok = true;
    if (i < line.size() && line[i] == '{') {
      ++i;
      while (ok && i < line.size() && line[i] != '}') {
        size_t eq = line.find('=', i);
        if (eq == std::string::npos) {
          ok = false;
          break;
        }
        std::string lname = line.substr(i, eq - i);
        if (!label_name(lname) || eq + 1 >= line.size() || line[eq + 1] != '"') {
          ok = false;
          break;
        }
        std::string lvalue;
        size_t j = eq + 2;
        for (; j < line.size() && line[j] != '"'; ++j) {
          if (line[j] == '\\') {
            if (j + 1 >= line.size()) {
              ok = false;
              break;
            }
            char e = line[++j];
            if (e == 'n') {
              lvalue += '\n';
            } else if (e == '\\' || e == '"') {
              lvalue += e;
            } else {
              ok = false;
              break;
            }
          } else {
            lvalue += line[j];
          }
        }
        if (!ok || j >= line.size()) {
          ok = false;
          break;
        }
        if (sample.labels.count(lname) != 0) error(line_no, "label " + lname + " twice");
        sample.labels[lname] = lvalue;
        i = j + 1;
        if (i < line.size() && line[i] == ',') ++i;
      }
      if (!ok || i >= line.size() || line[i] != '}') {
        error(line_no, "bad label set: " + line);
        continue;
      }
      ++i;
    }
    if (i >= line.size() || line[i] != ' ') {
      error(line_no, "no value: " + line);
      continue;
    }
    std::string rest = line.substr(i + 1);
    size_t sp = rest.find(' ');
    auto value = parse_value(rest.substr(0, sp));
    if (!value) {
      error(line_no, "bad value: " + line);
      continue;
    }
    if (sp != std::string::npos) {
      std::string ts = rest.substr(sp + 1);
      bool digits = !ts.empty();
      for (size_t k = 0; k < ts.size(); ++k) {
        if (std::isdigit(static_cast<unsigned char>(ts[k])) == 0 && !(k == 0 && ts[k] == '-')) {
          digits = false;
        }
      }
      if (!digits) error(line_no, "bad timestamp: " + line);
    }
    sample.value = *value;
    std::string fam_name = family_of(sample.name, out.families);
    if (fam_name != current) {
      if (closed.count(fam_name) != 0) error(line_no, "samples of " + fam_name + " not together");
      if (!current.empty()) closed.insert(current);
      current = fam_name;
    }
    std::string key = sample.name + "{";
    for (const auto& [k, v] : sample.labels) key += k + "=" + v + ",";
    if (!series.insert(key).second) error(line_no, "duplicate series " + key + "}");
    auto& fam = out.families[fam_name];
    fam.name = fam_name;
    if (fam.type == "counter" && !(sample.value >= 0)) error(line_no, "negative counter " + line);
    fam.samples.push_back(std::move(sample));
  }
  // Histogram structure, per label set (without `le`).
  for (const auto& [name, fam] : out.families) {
    if (fam.type != "histogram") continue;
    std::map<std::map<std::string, std::string>, std::vector<std::pair<double, double>>> buckets;
    std::map<std::map<std::string, std::string>, double> counts;
    std::set<std::map<std::string, std::string>> sums;
    for (const auto& s : fam.samples) {
      auto labels = s.labels;
      if (s.name == name + "_bucket") {
        auto le = labels.find("le");
        if (le == labels.end()) {
          out.errors.push_back(name + ": bucket without le");
          continue;
        }
        auto bound = parse_value(le->second);
        labels.erase(le);
        if (!bound) {
          out.errors.push_back(name + ": bad le");
          continue;
        }
        buckets[labels].push_back({*bound, s.value});
      } else if (s.name == name + "_count") {
        counts[labels] = s.value;
      } else if (s.name == name + "_sum") {
        sums.insert(labels);
      } else {
        out.errors.push_back(name + ": unexpected sample " + s.name);
      }
    }
    for (const auto& [labels, list] : buckets) {
      double prev_bound = -HUGE_VAL;
      double prev = 0;
      for (const auto& [bound, count] : list) {
        if (bound <= prev_bound) out.errors.push_back(name + ": le not increasing");
        if (count < prev) out.errors.push_back(name + ": buckets not cumulative");
        prev_bound = bound;
        prev = count;
      }
      if (list.empty() || !std::isinf(list.back().first)) {
        out.errors.push_back(name + ": no +Inf bucket");
      } else if (counts.count(labels) == 0 || counts.at(labels) != list.back().second) {
        out.errors.push_back(name + ": _count differs from the +Inf bucket");
      }
      if (sums.count(labels) == 0) out.errors.push_back(name + ": no _sum");
    }
  }
  return out;
}

}  // namespace konn::testsupport
