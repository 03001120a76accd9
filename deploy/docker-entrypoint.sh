#!/bin/sh
# The herald image's entrypoint: turns file secrets into the variables herald reads, then
# becomes herald (exec: herald is PID 1 and gets SIGTERM and SIGHUP itself).
#
# For each of HERALD_TOKEN_SECRET, HERALD_ADMIN_API_KEY and HERALD_TOKEN_PREVIOUS_SECRETS, a
# variable NAME_FILE naming a file (a Docker or compose secret) sets NAME to that file's
# content, without its final newline. NAME_FILE is then unset: herald warns about HERALD_*
# variables it does not know. Setting both NAME and NAME_FILE is an error.
set -eu

for name in HERALD_TOKEN_SECRET HERALD_ADMIN_API_KEY HERALD_TOKEN_PREVIOUS_SECRETS; do
    eval "file=\${${name}_FILE:-}"
    [ -n "$file" ] || continue
    eval "is_set=\${${name}+yes}"
    if [ "${is_set:-}" = yes ]; then
        echo "docker-entrypoint: both $name and ${name}_FILE are set; use one" >&2
        exit 64
    fi
    if [ ! -r "$file" ]; then
        echo "docker-entrypoint: ${name}_FILE=$file is not a readable file" >&2
        exit 66
    fi
    value=$(cat "$file")
    export "$name=$value"
    unset "${name}_FILE"
done
unset file is_set value

exec herald "$@"
