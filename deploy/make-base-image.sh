#!/usr/bin/env bash
# make-base-image.sh: makes the image deploy/Dockerfile starts FROM, debian:12-slim, on a
# machine that has podman and Debian's package registry but no container registry.
#
# debootstrap --variant=minbase installs Debian 12 (bookworm) from the same mirror the host's
# apt uses (read from /etc/apt/sources.list and /etc/apt/sources.list.d/), slimmed the way
# the official slim image is (no manuals, docs or translations, dpkg told to keep them out,
# no apt lists), with apt pointed at bookworm, bookworm-updates and bookworm-security. The
# result is imported with `podman import` as localhost/debian:12-slim, which `FROM
# debian:12-slim` finds before any registry, and labelled as made here. It is not Docker's
# official image: it has the same packages (minbase is what the official image is built
# from), but not its digest.
#
# Does nothing when the image exists already (--force makes it again). Needs root,
# debootstrap, podman and debian-archive-keyring (scripts/install-deps.sh installs them).
#
# Usage: deploy/make-base-image.sh [--force] [--tag NAME] [--mirror URL]
#   --tag     the image's name (default debian:12-slim)
#   --mirror  the Debian mirror (default: the host's apt source for bookworm)
set -euo pipefail

tag=debian:12-slim
mirror=""
is_forced=false
while [ $# -gt 0 ]; do
    case $1 in
    --force) is_forced=true ;;
    --tag) tag=$2; shift ;;
    --mirror) mirror=$2; shift ;;
    -h | --help) sed -n '2,/^set -e/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "make-base-image: unknown argument $1 (--help)" >&2; exit 2 ;;
    esac
    shift
done

if ! $is_forced && podman image exists "$tag"; then
    echo "make-base-image: $tag exists ($(podman image inspect --format '{{.Id}}' "$tag" | cut -c1-12)); --force makes it again" >&2
    exit 0
fi
[ "$(id -u)" -eq 0 ] || { echo "make-base-image: debootstrap needs root" >&2; exit 1; }
for tool in debootstrap podman; do
    command -v "$tool" >/dev/null || { echo "make-base-image: $tool missing (scripts/install-deps.sh)" >&2; exit 1; }
done

# The URI of the host's apt source for suite $1 (one-line .list or deb822 .sources format),
# component main; empty if none.
apt_source() {
    local suite=$1 f uri
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
        [ -r "$f" ] || continue
        uri=$(awk -v suite="$suite" '
            function found(uri) {
                if (is_done) return
                sub(/\/+$/, "", uri); print uri; is_done = 1
            }
            function paragraph_end() {
                if ((" " types " ") ~ / deb / && (" " suites " ") ~ (" " suite " ") &&
                    (" " comps " ") ~ / main /)
                    found(uris)
                types = uris = suites = comps = ""
            }
            /^[ \t]*#/ { next }
            FILENAME ~ /\.sources$/ {
                if (NF == 0) { paragraph_end(); next }
                key = tolower($1); $1 = ""; sub(/^ +/, "")
                if (key == "types:") types = $0
                else if (key == "uris:") uris = $1
                else if (key == "suites:") suites = $0
                else if (key == "components:") comps = $0
                next
            }
            $1 == "deb" {
                i = 2
                if ($i ~ /^\[/) { while (i < NF && $i !~ /\]$/) i++; i++ }
                if ($(i + 1) == suite) for (j = i + 2; j <= NF; j++) if ($j == "main") found($i)
            }
            END { paragraph_end() }' "$f")
        if [ -n "$uri" ]; then
            echo "$uri"
            return
        fi
    done
}

[ -n "$mirror" ] || mirror=$(apt_source bookworm)
[ -n "$mirror" ] || { echo "make-base-image: no apt source for bookworm main in /etc/apt; give --mirror" >&2; exit 1; }
security=$(apt_source bookworm-security)
[ -n "$security" ] || security=${mirror%/debian}/debian-security
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
[ -r "$keyring" ] || { echo "make-base-image: $keyring missing (debian-archive-keyring)" >&2; exit 1; }

work=$(mktemp -d "${TMPDIR:-/var/tmp}/herald-base-image.XXXXXX")
trap 'rm -rf "$work"' EXIT
root=$work/root
echo "make-base-image: debootstrap --variant=minbase bookworm from $mirror" >&2
if ! debootstrap --variant=minbase --keyring="$keyring" bookworm "$root" "$mirror" \
    >"$work/debootstrap.log" 2>&1; then
    tail -n 20 "$work/debootstrap.log" >&2
    echo "make-base-image: debootstrap failed (whole log above was $work/debootstrap.log)" >&2
    exit 1
fi

# apt as in the official image: deb822 sources, updates and security included.
rm -f "$root/etc/apt/sources.list"
cat >"$root/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $mirror
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: $security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF

# Slim: what a container never reads stays out, now and for every later apt-get install.
cat >"$root/etc/dpkg/dpkg.cfg.d/slim" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
path-exclude /usr/share/lintian/*
path-exclude /usr/share/linda/*
EOF
find "$root/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete
find "$root/usr/share/doc" -mindepth 1 -type d -empty -delete
rm -rf "$root"/usr/share/man/* "$root"/usr/share/info/* "$root"/usr/share/lintian/* \
    "$root"/usr/share/linda/*
find "$root/usr/share/locale" -mindepth 1 -maxdepth 1 -not -name locale.alias -exec rm -rf {} +
cat >"$root/etc/apt/apt.conf.d/docker-clean" <<'EOF'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
EOF
echo 'Acquire::Languages "none";' >"$root/etc/apt/apt.conf.d/docker-no-languages"
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/cache/apt/archives/*.deb \
    "$root"/var/log/* "$root"/tmp/* "$root"/var/tmp/*
# The engine provides these at run time; the host's must not ship in the image.
rm -f "$root/etc/hostname" "$root/etc/resolv.conf" "$root/etc/machine-id"
: >"$root/etc/machine-id"

echo "make-base-image: podman import as $tag" >&2
tar --numeric-owner --xattrs -C "$root" -c . |
    podman import --quiet \
        --change 'CMD ["bash"]' \
        --change "LABEL org.opencontainers.image.description=\"Debian 12 minbase made by herald's deploy/make-base-image.sh (debootstrap from $mirror), not Docker's official image\"" \
        --message "deploy/make-base-image.sh: debootstrap --variant=minbase bookworm $mirror" \
        - "$tag" >/dev/null
echo "make-base-image: $tag $(podman image inspect --format '{{.Id}}' "$tag" | cut -c1-12), $(du -sh "$root" | cut -f1)" >&2
