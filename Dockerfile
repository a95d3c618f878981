# syntax=docker/dockerfile:1
# One image per daemon, from one build:
#   docker build --target proxy-server   -t konn/proxy-server:0.1.0 .
#   docker build --target proxy-agent    -t konn/proxy-agent:0.1.0 .
#   docker build --target socks5         -t konn/socks5:0.1.0 .
#   docker build --target kubeproxy-http -t konn/kubeproxy-http:0.1.0 .
# The build stage compiles the release preset and packages each daemon as a .deb (CPack, with
# Depends computed from the binaries); each runtime stage installs its .deb with apt on
# debian:bookworm-slim, which brings exactly the shared libraries' packages, and runs as
# 65532:65532. The binary is /usr/bin/<daemon>, the ENTRYPOINT, as the manifests' command says.

ARG DEBIAN_RELEASE=bookworm

FROM debian:${DEBIAN_RELEASE} AS build
ARG DEBIAN_FRONTEND=noninteractive
# scripts/setup.sh's build packages, plus dpkg-dev and file for CPack's DEB generator.
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      build-essential cmake ninja-build pkg-config git \
      libasio-dev libssl-dev \
      libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc \
      libyaml-cpp-dev libspdlog-dev libfmt-dev \
      libcli11-dev nlohmann-json3-dev prometheus-cpp-dev \
      libhttp-parser-dev libc-ares-dev libnghttp2-dev \
      dpkg-dev file \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cmake --preset release -DKONN_BUILD_TESTS=OFF \
 && cmake --build --preset release --target proxy-server proxy-agent socks5 kubeproxy-http \
 && cd build/release && cpack -G DEB -B /packages \
 && ls -l /packages/*.deb

FROM debian:${DEBIAN_RELEASE}-slim AS proxy-server
ARG DEBIAN_FRONTEND=noninteractive
COPY --from=build /packages/konn-proxy-server_*.deb /tmp/
RUN apt-get update \
 && apt-get install -y --no-install-recommends /tmp/konn-proxy-server_*.deb \
 && rm -rf /var/lib/apt/lists/* /tmp/konn-proxy-server_*.deb
USER 65532:65532
# frontend (TCP mode), agents, health (the manifests' ports; the flags decide)
EXPOSE 8131 8132 8134
ENTRYPOINT ["/usr/bin/proxy-server"]

FROM debian:${DEBIAN_RELEASE}-slim AS proxy-agent
ARG DEBIAN_FRONTEND=noninteractive
COPY --from=build /packages/konn-proxy-agent_*.deb /tmp/
RUN apt-get update \
 && apt-get install -y --no-install-recommends /tmp/konn-proxy-agent_*.deb \
 && rm -rf /var/lib/apt/lists/* /tmp/konn-proxy-agent_*.deb
USER 65532:65532
# health (the manifests' ports; the flags decide)
EXPOSE 8093
ENTRYPOINT ["/usr/bin/proxy-agent"]

FROM debian:${DEBIAN_RELEASE}-slim AS socks5
ARG DEBIAN_FRONTEND=noninteractive
COPY --from=build /packages/konn-socks5_*.deb /tmp/
RUN apt-get update \
 && apt-get install -y --no-install-recommends /tmp/konn-socks5_*.deb \
 && rm -rf /var/lib/apt/lists/* /tmp/konn-socks5_*.deb
USER 65532:65532
# SOCKS5 (the manifests' ports; the flags decide)
EXPOSE 1080
ENTRYPOINT ["/usr/bin/socks5"]

FROM debian:${DEBIAN_RELEASE}-slim AS kubeproxy-http
ARG DEBIAN_FRONTEND=noninteractive
COPY --from=build /packages/konn-kubeproxy-http_*.deb /tmp/
RUN apt-get update \
 && apt-get install -y --no-install-recommends /tmp/konn-kubeproxy-http_*.deb \
 && rm -rf /var/lib/apt/lists/* /tmp/konn-kubeproxy-http_*.deb
USER 65532:65532
# HTTP (the manifests' ports; the flags decide)
EXPOSE 8001
ENTRYPOINT ["/usr/bin/kubeproxy-http"]
