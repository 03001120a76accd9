# Redis from Debian 12's own redis-server package (7.0), for hosts that cannot pull the
# official redis image: deploy/compose.debian.yaml builds it in place of redis:7.0-bookworm.
# Same port and behaviour as the official image for the compose stack: listens on every
# interface of the container's network, protected mode off (that network is the boundary:
# the port is not published), runs as the package's redis user.
#
#   podman build --isolation=chroot -f deploy/compose/redis.Dockerfile deploy/compose
FROM debian:12-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends redis-server \
    && rm -rf /var/lib/apt/lists/*
COPY redis-entrypoint.sh /usr/local/bin/redis-entrypoint.sh
WORKDIR /var/lib/redis
USER redis
EXPOSE 6379
ENTRYPOINT ["/usr/local/bin/redis-entrypoint.sh"]
CMD ["redis-server"]
