#include "core/kube/api_watch.h"

#include <catch2/catch.hpp>

#include "core/kube/lease.h"

using namespace konn::core::kube;

TEST_CASE("watch stream: events are split wherever the chunks end", "[kube][watch]") {
  const std::string stream =
      R"({"type":"ADDED","object":{"metadata":{"name":"a {\"}"}}})"
      "\n"
      R"({"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"7"},"x":[1,{"y":"]"}]}})"
      "\n";
  // Every split point of the stream into two pieces gives the same two documents.
  for (size_t cut = 0; cut <= stream.size(); ++cut) {
    JsonDocumentSplitter split;
    std::vector<std::string> docs;
    REQUIRE(split.feed(std::string_view(stream).substr(0, cut), &docs));
    REQUIRE(split.feed(std::string_view(stream).substr(cut), &docs));
    REQUIRE(docs.size() == 2);
    CHECK(docs[0] == R"({"type":"ADDED","object":{"metadata":{"name":"a {\"}"}}})");
    CHECK(split.pending() == 0);
  }
  // Byte by byte, without newlines between the documents.
  JsonDocumentSplitter split;
  std::vector<std::string> docs;
  for (char c : std::string(R"({"a":"\\"}{"b":1}  {"c":)")) REQUIRE(split.feed({&c, 1}, &docs));
  CHECK(docs == std::vector<std::string>{R"({"a":"\\"})", R"({"b":1})"});
  CHECK(split.pending() == 5);  // {"c": waits for the rest
}

TEST_CASE("watch stream: what is no JSON object stream is refused", "[kube][watch]") {
  std::vector<std::string> docs;
  JsonDocumentSplitter garbage;
  CHECK_FALSE(garbage.feed("{\"a\":1} oops", &docs));
  CHECK(docs.size() == 1);
  CHECK(garbage.error().find("expected a JSON object") != std::string::npos);
  CHECK_FALSE(garbage.feed("{}", &docs));  // stays failed
  JsonDocumentSplitter small(16);
  CHECK_FALSE(small.feed("{\"a\":\"0123456789abcdef\"}", &docs));
  CHECK(small.error().find("larger than 16 bytes") != std::string::npos);
}

TEST_CASE("lease watch events parse, bookmarks and errors included", "[kube][watch]") {
  auto added = parse_lease_event(
      R"({"type":"ADDED","object":{"kind":"Lease","metadata":{"name":"s1","resourceVersion":"12",)"
      R"("labels":{"k8s-app":"konnectivity-server"}},"spec":{"holderIdentity":"s1",)"
      R"("leaseDurationSeconds":30,"renewTime":"2024-03-01T00:00:00.000000Z"}}})");
  REQUIRE(added);
  CHECK(added->type == LeaseEvent::Type::Added);
  REQUIRE(added->lease);
  CHECK(added->lease->name == "s1");
  CHECK(added->lease->lease_duration_seconds == 30);
  CHECK(added->resource_version == "12");
  auto deleted = parse_lease_event(R"({"type":"DELETED","object":{"metadata":{"name":"s1"}}})");
  REQUIRE(deleted);
  CHECK(deleted->type == LeaseEvent::Type::Deleted);
  auto bookmark =
      parse_lease_event(R"({"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"99"}}})");
  REQUIRE(bookmark);
  CHECK(bookmark->type == LeaseEvent::Type::Bookmark);
  CHECK(bookmark->resource_version == "99");
  CHECK_FALSE(bookmark->lease);
  auto gone = parse_lease_event(
      R"({"type":"ERROR","object":{"kind":"Status","status":"Failure","reason":"Expired",)"
      R"("code":410,"message":"too old resource version: 5 of 90"}})");
  REQUIRE(gone);
  CHECK(gone->type == LeaseEvent::Type::Error);
  CHECK(gone->code == 410);
  CHECK(gone->reason == "Expired");
  CHECK_FALSE(parse_lease_event(R"({"type":"WHATEVER","object":{}})"));
  CHECK_FALSE(parse_lease_event(R"({"type":"ADDED","object":{"metadata":{}}})"));  // no name
  CHECK_FALSE(parse_lease_event("not json"));
  std::string rv;
  auto items = parse_lease_list(R"({"metadata":{"resourceVersion":"42"},"items":[]})", &rv);
  REQUIRE(items);
  CHECK(rv == "42");
}
