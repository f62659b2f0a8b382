# syntax=docker/dockerfile:1
# Countersign image: the authority and the proxy sidecar from one image, built from the npm
# package itself (what `npm pack` makes), so the image runs exactly what the package ships.
#
#   docker build -t countersign:0.2.0 .
#   docker run countersign:0.2.0 authority --config /etc/countersign/authority.yaml
#   docker run countersign:0.2.0 proxy --config /etc/countersign-proxy/proxy.yaml
#   docker run countersign:0.2.0 migrate
#
# The entrypoint is the `countersign` command: the first argument is the command
# (authority, proxy, migrate, keys …). With no argument it runs the authority.

ARG NODE_IMAGE=node:24-slim

# 1. Build: every dependency (TypeScript, Vite), then `npm pack`, whose prepack compiles dist/
#    (the console's pages to dist/console/) and which keeps only the package's files.
FROM ${NODE_IMAGE} AS build
WORKDIR /src
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json README.md LICENSE CHANGELOG.md ./
COPY scripts ./scripts
COPY authority ./authority
COPY proxy ./proxy
COPY shared ./shared
COPY bin ./bin
COPY console ./console
COPY config ./config
RUN npm pack --pack-destination /tmp && mkdir /package && tar -xzf /tmp/countersign-*.tgz -C /package --strip-components=1

# 2. Install the package with its production dependencies, at the versions package-lock.json
#    pins (installing the tarball by name would resolve them afresh).
FROM ${NODE_IMAGE} AS install
WORKDIR /app
COPY --from=build /package ./
COPY package-lock.json ./
RUN npm ci --omit=dev --ignore-scripts --no-audit --no-fund && rm package-lock.json && npm cache clean --force

# 3. Runtime: the installed package, with `countersign` on PATH.
FROM ${NODE_IMAGE} AS runtime
ENV NODE_ENV=production \
    COUNTERSIGN_DATA_DIR=/var/lib/countersign \
    COUNTERSIGN_AUTHORITY_LISTEN=0.0.0.0:7070 \
    COUNTERSIGN_AUTHORITY_ADMIN_LISTEN=0.0.0.0:7071 \
    COUNTERSIGN_PROXY_LISTEN=0.0.0.0:7080 \
    COUNTERSIGN_PROXY_ADMIN_LISTEN=0.0.0.0:7081
WORKDIR /app
# The code is owned by root and read-only for the runtime user; only the data directory is
# writable (mount an emptyDir there when the root filesystem is read-only).
COPY --chown=root:root --from=install /app ./
RUN ln -s /app/dist/bin/countersign.js /usr/local/bin/countersign \
    && mkdir -p /var/lib/countersign && chown 1000:1000 /var/lib/countersign
# The `node` user of the base image, by number so that runAsNonRoot can check it.
USER 1000:1000
# 9191/9192: the proxy as an Envoy external authorizer (gRPC/HTTP), when proxy.yaml has ext_authz.
EXPOSE 7070 7071 7080 7081 9191 9192
ENTRYPOINT ["countersign"]
CMD ["authority"]
