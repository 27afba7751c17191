# servebench in a container, for the client pods of `servebench k8s job` (docs/kubernetes.md).
#   docker build -t REGISTRY/servebench:TAG . && docker push REGISTRY/servebench:TAG
# Two stages: the release binary is built with the locked dependency tree, then copied into a
# slim Debian runtime that keeps /bin/sh, tar and base64 (the Job's `--results stdout` mode
# prints each pod's result files into its log with them).

FROM rust:1-slim-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p servebench-cli \
 && strip target/release/servebench

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --home-dir /work --create-home servebench
COPY --from=build /src/target/release/servebench /usr/local/bin/servebench
USER 10001
WORKDIR /work
ENTRYPOINT ["servebench"]
CMD ["--help"]
