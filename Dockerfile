# syntax=docker/dockerfile:1
# Countersign image: the authority and the proxy sidecar from one image.
#
#   docker build -t countersign:0.1.0 .
#   docker run countersign:0.1.0 authority --config /etc/countersign/authority.yaml
#   docker run countersign:0.1.0 proxy --config /etc/countersign-proxy/proxy.yaml
#   docker run countersign:0.1.0 migrate
#
# The entrypoint is `node dist/bin/countersign.js`: the first argument is the command
# (authority, proxy, migrate, keys …). With no argument it runs the authority.

ARG NODE_IMAGE=node:20-slim

# 1. Build: every dependency (TypeScript, Vite), compile to dist/ (the console's pages to dist/console/).
FROM ${NODE_IMAGE} AS build
WORKDIR /src
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json ./
COPY authority ./authority
COPY proxy ./proxy
COPY shared ./shared
COPY bin ./bin
COPY console ./console
RUN npm run build

# 2. Production dependencies only.
FROM ${NODE_IMAGE} AS deps
WORKDIR /src
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --no-audit --no-fund && npm cache clean --force

# 3. Runtime: compiled code (with the Envoy external authorizer's .proto files, which the build
#    copies into dist/proxy/ext-authz/protos), production node_modules, the SQL migrations and the
#    example configs.
FROM ${NODE_IMAGE} AS runtime
ENV NODE_ENV=production \
    COUNTERSIGN_DATA_DIR=/var/lib/countersign \
    COUNTERSIGN_AUTHORITY_LISTEN=0.0.0.0:7070 \
    COUNTERSIGN_AUTHORITY_ADMIN_LISTEN=0.0.0.0:7071 \
    COUNTERSIGN_PROXY_LISTEN=0.0.0.0:7080 \
    COUNTERSIGN_PROXY_ADMIN_LISTEN=0.0.0.0:7081
WORKDIR /app
# package.json marks the package root: migrations and the bootstrap policy are found from it.
COPY --chown=root:root package.json ./
COPY --chown=root:root --from=deps /src/node_modules ./node_modules
COPY --chown=root:root --from=build /src/dist ./dist
COPY --chown=root:root authority/store/migrations ./authority/store/migrations
COPY --chown=root:root config ./config
# The code is owned by root and read-only for the runtime user; only the data directory is
# writable (mount an emptyDir there when the root filesystem is read-only).
RUN mkdir -p /var/lib/countersign && chown 1000:1000 /var/lib/countersign
# The `node` user of the base image, by number so that runAsNonRoot can check it.
USER 1000:1000
# 9191/9192: the proxy as an Envoy external authorizer (gRPC/HTTP), when proxy.yaml has ext_authz.
EXPOSE 7070 7071 7080 7081 9191 9192
ENTRYPOINT ["node", "dist/bin/countersign.js"]
CMD ["authority"]
