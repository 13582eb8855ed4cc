# infera's container image: `docker build -t infera .` from the repository
# root. Two stages: a Debian 12 build stage, and a slim runtime stage with
# the binary and its shared libraries only. The model is not baked in: mount
# it (a .gguf file, or a folder holding one) and pass --model.
#   docker run -p 8080:8080 -v /srv/models:/models:ro infera \
#     serve --model /models/model.gguf --host 0.0.0.0 --port 8080
# Kubernetes / KServe manifests: deploy/kubernetes, deploy/kserve.
# (tests/deploy/test_manifests.py checks that every file copied here exists
# and every package installed is a Debian 12 package.)

FROM debian:12 AS build
ENV DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      build-essential cmake ninja-build pkg-config git \
      nlohmann-json3-dev libcli11-dev libfmt-dev libspdlog-dev libpcre2-dev libboost-dev \
      libopenblas-dev libopenmpi-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY CMakeLists.txt ./
COPY include/ include/
COPY src/ src/
COPY tools/ tools/
RUN cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DINFERA_TESTS=OFF -DINFERA_BENCH=OFF \
 && cmake --build build --target infera \
 && install -D -m 0755 build/tools/infera /out/usr/local/bin/infera

FROM debian:12-slim AS runtime
ENV DEBIAN_FRONTEND=noninteractive
# The binary's shared libraries (OpenBLAS for the calibrated quantizers,
# opened at run time by the commands that solve, so ldd does not list it; Open
# MPI for --tp / --pp across pods, with ssh for mpirun's remote launch), curl
# for the health check.
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      libfmt9 libspdlog1.10 libpcre2-8-0 libopenblas0-pthread libopenmpi3 openmpi-bin openssh-client openssh-server \
      curl ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 infera \
 && useradd --system --uid 10001 --gid infera --home-dir /home/infera --create-home infera
COPY --from=build /out/ /
USER 10001:10001
WORKDIR /home/infera
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=3s --start-period=300s --retries=3 \
  CMD curl -fsS http://127.0.0.1:8080/health || exit 1
ENTRYPOINT ["infera"]
CMD ["serve", "--host", "0.0.0.0", "--port", "8080", "--model", "/models"]
