# Included by ctest after the discovered Catch2 tests of this directory are defined.
set_tests_properties(
  "monitoring: every rule and dashboard expression returns data from a real Prometheus scraping the daemons"
  PROPERTIES LABELS "e2e;monitoring" COST 9)
