# Slipway platform image: `slipwayd` and the `slipway` client.
#
#   docker build -t slipway .
#   docker run --rm -p 127.0.0.1:3717:3717 -p 127.0.0.1:3718:3718 -v slipway-data:/data slipway
#
# Without NATS_URL, `slipwayd up` runs its embedded nats-server (installed
# below) inside the container; compose.yaml uses a separate NATS container.

# ---- build: all dependencies, TypeScript -> dist/ ----
FROM node:20-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY . .
RUN npm run build && rm -rf dist/test dist/bench

# ---- runtime: production dependencies, the build, the starter template ----
FROM node:20-bookworm-slim
RUN apt-get update \
  && apt-get install -y --no-install-recommends nats-server \
  && rm -rf /var/lib/apt/lists/*
ENV NODE_ENV=production \
  SLIPWAY_DATA_DIR=/data \
  SLIPWAY_CONTROL_HOST=0.0.0.0 \
  SLIPWAY_DATA_HOST=0.0.0.0
# Loopback inside a container is unreachable from outside, so both planes bind
# 0.0.0.0. The control plane always wants its token: SLIPWAY_CONTROL_TOKEN, or
# the one generated at first boot into /data/control.token.
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --no-audit --no-fund && npm cache clean --force
COPY --from=build /app/dist ./dist
# initialize-app renders the starter from here (dist/starter/mod.js looks two levels up)
COPY starter/template ./starter/template
# slipwayd.mjs: the platform bundled into one file by npm run build (starts about 0.5 s sooner)
RUN chmod +x dist/bin/slipwayd.mjs dist/bin/slipway.js \
  && ln -s /app/dist/bin/slipwayd.mjs /usr/local/bin/slipwayd \
  && ln -s /app/dist/bin/slipway.js /usr/local/bin/slipway \
  && mkdir -p /data \
  && chown node:node /data
USER node
VOLUME ["/data"]
EXPOSE 3717 3718
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:3717/readyz').then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))"]
CMD ["slipwayd", "up"]
