# Install layout (GNUInstallDirs) and Debian packages (CPack, one per daemon plus the manifests).
#
#   cmake --install build/release --prefix /usr/local     # everything
#   (cd build/release && cpack -G DEB)                    # konn-<daemon>_<version>_<arch>.deb
#
# Components: proxy-server, proxy-agent, socks5, kubeproxy-http (binary + README), manifests
# (manifests/ as kustomize bases and overlays, docs). Only these are installed and packaged;
# test helpers and benchmarks are not installed at all.
include(GNUInstallDirs)

set(KONN_PACKAGED_DAEMONS proxy-server proxy-agent socks5 kubeproxy-http)
foreach(daemon IN LISTS KONN_PACKAGED_DAEMONS)
  install(TARGETS ${daemon} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT ${daemon})
  install(FILES ${PROJECT_SOURCE_DIR}/${daemon}/README.md
          DESTINATION ${CMAKE_INSTALL_DATAROOTDIR}/doc/konn-${daemon} COMPONENT ${daemon})
endforeach()
install(DIRECTORY ${PROJECT_SOURCE_DIR}/manifests/
        DESTINATION ${CMAKE_INSTALL_DATADIR}/konn/manifests COMPONENT manifests)
install(FILES ${PROJECT_SOURCE_DIR}/README.md ${PROJECT_SOURCE_DIR}/docs/ARCHITECTURE.md
              ${PROJECT_SOURCE_DIR}/docs/deploy.md
        DESTINATION ${CMAKE_INSTALL_DATAROOTDIR}/doc/konn COMPONENT manifests)

# cpack installs the binaries the tree has already built; it must not first build `all` (the
# packaging test runs inside ctest, on the tree's own binaries).
set(CMAKE_SKIP_INSTALL_ALL_DEPENDENCY TRUE)

set(CPACK_PACKAGE_NAME konn)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_VENDOR "konn")
set(CPACK_PACKAGE_CONTACT "konn maintainers <konn@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "Kubernetes network proxies: Konnectivity server and agent, SOCKS5, kubectl proxy")
set(CPACK_GENERATOR DEB)
set(CPACK_STRIP_FILES TRUE)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL ${KONN_PACKAGED_DAEMONS} manifests)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION net)
# Depends from the ELF files (dpkg-shlibdeps, package dpkg-dev): the exact library packages of
# the distribution the packages were built on.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_MANIFESTS_PACKAGE_ARCHITECTURE all)
set(CPACK_DEBIAN_PROXY-SERVER_DESCRIPTION
    "Konnectivity proxy-server, wire- and flag-compatible with apiserver-network-proxy")
set(CPACK_DEBIAN_PROXY-AGENT_DESCRIPTION
    "Konnectivity proxy-agent, wire- and flag-compatible with apiserver-network-proxy")
set(CPACK_DEBIAN_SOCKS5_DESCRIPTION "SOCKS5 server (RFC 1928/1929) for reaching apiservers")
set(CPACK_DEBIAN_KUBEPROXY-HTTP_DESCRIPTION
    "kubectl proxy compatible API proxy with an HTTP CONNECT mode")
set(CPACK_DEBIAN_MANIFESTS_DESCRIPTION
    "Kubernetes manifests (kustomize) and deployment docs for the konn proxies")
include(CPack)
