# Included by ctest after the discovered Catch2 tests of this directory are defined.
set_tests_properties(
  "status: headless Chromium renders the page: agents, tunnels and a dial failure"
  PROPERTIES LABELS "e2e;status" COST 6)
foreach(t
    "status: /status.json lists agents, tunnels, failures, limits and certificates, and its counts agree with /metrics"
    "status: the agent's /status.json lists its server, tunnels, refusals and certificates"
    "status: socks5 and kubeproxy-http export the expiry of their certificates"
    "status: the server's certificate expiry gauge follows a reload of its files"
    "status: socks5's /status.json shows curl's open session, its failures and no password"
    "status: socks5's page on a health port beyond loopback needs --status-page-off-loopback"
    "status: kubeproxy-http's /status.json shows a forwarded watch and a CONNECT tunnel, their failures and no token or password"
    "status: kubeproxy-http's page on a health port beyond loopback needs --status-page-off-loopback"
    "status: socks5 and kubeproxy-http show a tunnel through Konnectivity as such")
  set_tests_properties("${t}" PROPERTIES LABELS "e2e;status")
endforeach()
set_tests_properties("status: beyond loopback the page needs --status-page-off-loopback"
  PROPERTIES LABELS "e2e;status")
