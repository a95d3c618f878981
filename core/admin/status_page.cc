#include "core/admin/status_page.h"

#include <algorithm>
#include <chrono>
#include <ctime>
#include <memory>
#include <mutex>

#include <asio/ip/address.hpp>

namespace konn::core::admin {
namespace {

// A body is served again for this long: a page left open by several people, or a scrape loop,
// costs one build per second.
constexpr std::chrono::seconds kReuse{1};

// The page's script: renders the JSON (inline first, then /status.json every 5 s) as tables.
constexpr const char kScript[] = R"JS(
(function () {
  var root = document.getElementById('root');
  function cell(v) {
    if (v === null || v === undefined) return '';
    if (typeof v === 'object') return JSON.stringify(v);
    return String(v);
  }
  function isRows(v) {
    return Array.isArray(v) && v.length > 0 && v.every(function (x) {
      return x && typeof x === 'object' && !Array.isArray(x);
    });
  }
  function table(rows) {
    var keys = [];
    rows.forEach(function (r) {
      Object.keys(r).forEach(function (k) { if (keys.indexOf(k) < 0) keys.push(k); });
    });
    var t = document.createElement('table');
    var h = t.createTHead().insertRow();
    keys.forEach(function (k) {
      var th = document.createElement('th'); th.textContent = k; h.appendChild(th);
    });
    var id = ['id', 'flag', 'listener', 'name'].filter(function (k) {
      return keys.indexOf(k) >= 0;
    })[0] || keys[0];
    var b = t.createTBody();
    rows.forEach(function (r) {
      var tr = b.insertRow();
      tr.setAttribute('data-key', cell(r[id]));
      keys.forEach(function (k) {
        var td = tr.insertCell(); td.textContent = cell(r[k]); td.className = 'c-' + k;
      });
    });
    return t;
  }
  function pager(el, name, v) {
    var p = document.createElement('p'); p.className = 'pager';
    var last = Math.min(v.offset + v.limit, v.total);
    p.textContent = (v.total ? (v.offset + 1) + '-' + last : '0') + ' of ' + v.total + ' ';
    function link(text, offset) {
      var q = new URLSearchParams(location.search);
      q.set(name + '_offset', String(Math.max(0, offset)));
      var a = document.createElement('a'); a.href = '?' + q.toString(); a.textContent = text;
      p.appendChild(a); p.appendChild(document.createTextNode(' '));
    }
    if (v.offset > 0) link('previous', v.offset - v.limit);
    if (last < v.total) link('next', v.offset + v.limit);
    el.appendChild(p);
  }
  function render(el, name, v, depth) {
    if (isRows(v)) { el.appendChild(table(v)); return; }
    if (Array.isArray(v)) {
      var e = document.createElement('p'); e.className = 'empty';
      e.textContent = v.length ? v.join(', ') : '(none)'; el.appendChild(e); return;
    }
    if (v && typeof v === 'object') {
      if (Array.isArray(v.items) && typeof v.total === 'number' && typeof v.offset === 'number') {
        pager(el, name, v);
      }
      var scalars = Object.keys(v).filter(function (k) {
        return v[k] === null || typeof v[k] !== 'object';
      });
      if (scalars.length) {
        var t = document.createElement('table'); t.className = 'kv';
        scalars.forEach(function (k) {
          var tr = t.insertRow(); tr.setAttribute('data-key', k);
          var th = document.createElement('th'); th.textContent = k; tr.appendChild(th);
          tr.insertCell().textContent = cell(v[k]);
        });
        el.appendChild(t);
      }
      Object.keys(v).forEach(function (k) {
        if (v[k] === null || typeof v[k] !== 'object') return;
        var s = document.createElement('div'); s.id = el.id + '.' + k;
        var h = document.createElement('h' + Math.min(depth + 3, 6)); h.textContent = k;
        s.appendChild(h); render(s, k, v[k], depth + 1); el.appendChild(s);
      });
      return;
    }
    var p = document.createElement('p'); p.textContent = cell(v); el.appendChild(p);
  }
  function draw(d) {
    root.textContent = '';
    Object.keys(d).forEach(function (k) {
      var s = document.createElement('section'); s.id = k;
      var h = document.createElement('h2'); h.textContent = k; s.appendChild(h);
      render(s, k, d[k], 0); root.appendChild(s);
    });
    document.getElementById('updated').textContent = 'as of ' + (d.generated_at || '');
  }
  draw(JSON.parse(document.getElementById('status-data').textContent));
  setInterval(function () {
    fetch('status.json' + location.search, {cache: 'no-store'})
        .then(function (r) { return r.json(); })
        .then(draw)
        .catch(function (e) {
          document.getElementById('updated').textContent = 'reload failed: ' + e;
        });
  }, 5000);
})();
)JS";

constexpr const char kStyle[] =
    "body{font:13px/1.4 sans-serif;margin:1em;color:#222}"
    "table{border-collapse:collapse;margin:.3em 0 1em}"
    "td,th{border:1px solid #ccc;padding:2px 6px;text-align:left;vertical-align:top}"
    "thead th,.kv th{background:#eee}section{margin-bottom:1.5em}";

std::string escape_html(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '&':
        out += "&amp;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// JSON inside a <script> element: "</" would end it, so every '<' is written as \u003c.
std::string json_for_script(const nlohmann::ordered_json& data) {
  std::string text = data.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    if (c == '<') {
      out += "\\u003c";
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

std::string status_html(const std::string& title, const nlohmann::ordered_json& data) {
  std::string t = escape_html(title);
  return "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>" + t + "</title><style>" +
         kStyle + "</style></head>\n<body><h1>" + t +
         "</h1><p id=\"updated\"></p><div id=\"root\"></div>\n"
         "<script id=\"status-data\" type=\"application/json\">" +
         json_for_script(data) + "</script>\n<script>" + kScript + "</script>\n</body></html>\n";
}

std::map<std::string, std::string> parse_query(const std::string& query) {
  std::map<std::string, std::string> out;
  size_t pos = 0;
  while (pos <= query.size()) {
    size_t amp = query.find('&', pos);
    if (amp == std::string::npos) amp = query.size();
    std::string part = query.substr(pos, amp - pos);
    if (!part.empty()) {
      size_t eq = part.find('=');
      std::string key = part.substr(0, eq);
      std::string value = eq == std::string::npos ? "" : part.substr(eq + 1);
      for (char& c : value) {
        if (c == '+') c = ' ';
      }
      out[key] = value;
    }
    pos = amp + 1;
  }
  return out;
}

int64_t query_int(const std::map<std::string, std::string>& q, const std::string& key,
                  int64_t fallback, int64_t lo, int64_t hi) {
  auto it = q.find(key);
  if (it == q.end()) return fallback;
  try {
    size_t used = 0;
    int64_t v = std::stoll(it->second, &used);
    if (used != it->second.size()) return fallback;
    return std::clamp(v, lo, hi);
  } catch (const std::exception&) {
    return fallback;
  }
}

bool is_loopback_bind(const std::string& address) {
  if (address == "localhost") return true;
  std::string a = address;
  if (a.size() > 2 && a.front() == '[' && a.back() == ']') a = a.substr(1, a.size() - 2);
  std::error_code ec;
  auto ip = asio::ip::make_address(a, ec);
  return !ec && ip.is_loopback();
}

void route_status(AdminServer& admin, const std::string& title, const std::string& bind_address,
                  bool allowed_off_loopback, const std::string& flag,
                  std::function<nlohmann::ordered_json(const std::string& query)> build) {
  if (!allowed_off_loopback && !is_loopback_bind(bind_address)) {
    auto off = [flag](const std::string&) {
      return Response{403,
                      "text/plain; charset=utf-8",
                      "the status page is off: the admin port listens beyond loopback; " + flag +
                          " turns it on (it shows no secrets)\n",
                      {}};
    };
    admin.route("/status", off);
    admin.route("/status.json", off);
    return;
  }
  // The admin listener has one thread, so the cache is touched by one thread at a time; the
  // mutex keeps that true should it ever have more.
  struct Cache {
    std::mutex mu;
    std::string query;
    nlohmann::ordered_json data;
    std::chrono::steady_clock::time_point at;
  };
  auto cache = std::make_shared<Cache>();
  auto get = [cache, build = std::move(build)](const std::string& query) {
    std::lock_guard lock(cache->mu);
    auto now = std::chrono::steady_clock::now();
    if (cache->data.is_null() || cache->query != query || now - cache->at >= kReuse) {
      cache->data = build(query);
      cache->query = query;
      cache->at = now;
    }
    return cache->data;
  };
  admin.route("/status.json", [get](const std::string& query) {
    return Response{
        200,
        "application/json",
        get(query).dump(1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n",
        {}};
  });
  admin.route("/status", [get, title](const std::string& query) {
    return Response{200, "text/html; charset=utf-8", status_html(title, get(query)), {}};
  });
}

nlohmann::ordered_json certificates_json(const CertificateGauges& certificates) {
  const auto wall = std::chrono::system_clock::now();
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const auto& c : certificates.entries()) {
    nlohmann::ordered_json e{
        {"listener", c.listener}, {"kind", c.kind}, {"path", c.path}, {"subject", c.subject}};
    if (c.not_after) {
      e["not_after"] = rfc3339(*c.not_after);
      e["expires_in_seconds"] = std::chrono::duration<double>(*c.not_after - wall).count();
    }
    e["error"] = c.error;
    out.push_back(std::move(e));
  }
  return out;
}

std::string rfc3339(std::chrono::system_clock::time_point t) {
  std::time_t s = std::chrono::system_clock::to_time_t(t);
  std::tm tm{};
  gmtime_r(&s, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace konn::core::admin
