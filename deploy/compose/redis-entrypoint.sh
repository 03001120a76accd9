#!/bin/sh
# Entrypoint of deploy/compose/redis.Dockerfile: runs the command it is given; a redis-server
# command gets --protected-mode no after its config file, if it names one (redis-server
# wants the file first). Protected mode refuses clients from other hosts when Redis has no
# password, and in a container every client is another host; the official image turns it
# off the same way, leaving the boundary to the container network.
set -eu
if [ "${1:-}" = redis-server ]; then
    shift
    if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then
        conf=$1
        shift
        set -- redis-server "$conf" --protected-mode no "$@"
    else
        set -- redis-server --protected-mode no "$@"
    fi
fi
exec "$@"
