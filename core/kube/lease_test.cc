#include "core/kube/lease.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

using namespace konn::core::kube;
using namespace std::chrono_literals;

TEST_CASE("micro time round-trips and RFC 3339 offsets parse", "[kube][lease]") {
  auto t = parse_rfc3339("2024-02-29T23:59:58.123456Z");
  REQUIRE(t);
  CHECK(format_micro_time(*t) == "2024-02-29T23:59:58.123456Z");
  auto plain = parse_rfc3339("2024-03-01T00:00:00Z");
  REQUIRE(plain);
  CHECK(*plain - *t == 1876544us);
  auto offset = parse_rfc3339("2024-03-01T02:00:00+02:00");
  REQUIRE(offset);
  CHECK(*offset == *plain);
  CHECK_FALSE(parse_rfc3339("2024-03-01 00:00:00Z"));
  CHECK_FALSE(parse_rfc3339("2024-03-01T00:00:00"));
  CHECK_FALSE(parse_rfc3339("2024-13-01T00:00:00Z"));
  CHECK_FALSE(parse_rfc3339("2024-03-01T00:00:00.Z"));
  CHECK_FALSE(parse_rfc3339("2024-03-01T00:00:00Zjunk"));
}

TEST_CASE("a lease is valid until renew (else acquire) time plus duration", "[kube][lease]") {
  auto now = std::chrono::system_clock::now();
  Lease l;
  l.lease_duration_seconds = 30;
  CHECK_FALSE(lease_valid(l, now));  // no time at all
  l.acquire_time = now - 20s;
  CHECK(lease_valid(l, now));
  l.renew_time = now - 31s;  // renew time wins over the acquire time
  CHECK_FALSE(lease_valid(l, now));
  l.renew_time = now - 29s;
  CHECK(lease_valid(l, now));
  l.lease_duration_seconds.reset();
  CHECK_FALSE(lease_valid(l, now));
}

TEST_CASE("lease JSON: written fields come back, lists and status reasons parse", "[kube][lease]") {
  Lease l;
  l.name = "konnectivity-proxy-server-a";
  l.labels = {{"k8s-app", "konnectivity-server"}};
  l.holder_identity = "a";
  l.lease_duration_seconds = 30;
  l.renew_time = parse_rfc3339("2024-01-02T03:04:05.000006Z");
  std::string doc = lease_to_json(l, "kube-system");
  auto written = nlohmann::json::parse(doc);
  CHECK(written["apiVersion"] == "coordination.k8s.io/v1");
  CHECK(written["kind"] == "Lease");
  CHECK(written["metadata"]["namespace"] == "kube-system");
  CHECK(written["spec"]["renewTime"] == "2024-01-02T03:04:05.000006Z");
  auto back = parse_lease(doc);
  REQUIRE(back);
  CHECK(back->name == l.name);
  CHECK(back->labels == l.labels);
  CHECK(back->holder_identity == "a");
  CHECK(back->lease_duration_seconds == 30);
  CHECK(back->renew_time == l.renew_time);
  CHECK_FALSE(back->acquire_time);

  auto list = parse_lease_list(R"({"kind":"LeaseList","items":[)" + doc + "," + doc + "]}");
  REQUIRE(list);
  CHECK(list->size() == 2);
  CHECK(parse_lease_list(R"({"kind":"LeaseList","metadata":{}})")->empty());
  CHECK_FALSE(parse_lease_list("[]"));
  CHECK_FALSE(parse_lease_list(R"({"items":[{"spec":{}}]})"));  // an item without a name
  CHECK(status_reason(R"({"kind":"Status","reason":"Conflict","code":409})") == "Conflict");
  CHECK(status_reason("not json").empty());
}

TEST_CASE("label sets: upstream syntax, sorted formatting, every error named", "[kube][lease]") {
  std::vector<std::string> errors;
  auto set = parse_label_set("k8s-app=konnectivity-server, example.com/tier=cp", &errors);
  CHECK(errors.empty());
  CHECK(format_label_set(set) == "example.com/tier=cp,k8s-app=konnectivity-server");
  CHECK(parse_label_set("", &errors).empty());
  parse_label_set("novalue,a==b,-bad=x,UPPER.example/x=y,k=v v", &errors);
  CHECK(errors.size() == 5);
  // A key given twice: upstream's ParseLabels keeps the last value; konn too, with a warning.
  errors.clear();
  std::vector<std::string> warnings;
  auto twice = parse_label_set("a=b,tier=cp,a=c", &errors, &warnings);
  CHECK(errors.empty());
  CHECK(format_label_set(twice) == "a=c,tier=cp");
  REQUIRE(warnings.size() == 1);
  CHECK(warnings[0] == "label key \"a\" given twice: the last value, \"c\", is used");
  CHECK(query_escape("k8s-app=konnectivity-server,a!=b") ==
        "k8s-app%3Dkonnectivity-server%2Ca%21%3Db");
}

TEST_CASE("lease collection: one namespace, or every namespace when none is given",
          "[kube][lease]") {
  CHECK(lease_collection_path("kube-system") ==
        "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases");
  CHECK(lease_collection_path("") == "/apis/coordination.k8s.io/v1/leases");
}
