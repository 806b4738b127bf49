#!/bin/sh
# Builds keyhole's Debian package from built binaries (`make deb` passes the release build).
#
#   build-deb.sh --bin DIR --out FILE.deb [--version V] [--maintainer "NAME <ADDRESS>"] [--strip]
#                [--allow-unpackaged-libs] [--fast]
#
# The package: /usr/bin/keyholed and keyhole, the systemd units (keyholed-http.socket shipped
# disabled), sysusers.d and tmpfiles.d entries, /etc/keyhole/keyholed.toml as a conffile, the man
# pages, and the maintainer scripts of this directory. Depends lists the Debian packages that own the shared libraries the binaries name
# (DT_NEEDED, found with ldconfig and dpkg -S), plus systemd and init-system-helpers for the
# scripts. A library no package owns (a toolchain's Swift runtime in a debug build) is an error
# unless --allow-unpackaged-libs, for tests that install the package on the machine that built it.
#
# lintian-clean but for what packaging/deb/lintian-overrides explains (`make deb` runs lintian). The
# project has no mail domain: --maintainer (make deb's DEB_MAINTAINER) names whoever builds the
# package for a site; without it the placeholder address is kept and its lintian tag overridden.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
packaging=$(dirname "$here")
top=$(dirname "$packaging")
placeholder="Keyhole developers <keyhole@localhost>"
bin="" out="" version="" strip=no allow=no compression=xz maintainer=$placeholder
while [ $# -gt 0 ]; do
    case "$1" in
        --bin) bin=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        --version) version=$2; shift 2 ;;
        --maintainer) maintainer=$2; shift 2 ;;
        --strip) strip=yes; shift ;;
        --allow-unpackaged-libs) allow=yes; shift ;;
        --fast) compression=gzip; shift ;;
        *) echo "build-deb.sh: unknown argument $1" >&2; exit 64 ;;
    esac
done
[ -n "$bin" ] && [ -n "$out" ] || { echo "usage: build-deb.sh --bin DIR --out FILE.deb [--version V] [--strip] [--allow-unpackaged-libs]" >&2; exit 64; }
case "$maintainer" in
    *"|"* | *"&"* | *"\\"* | *"
"*) echo "build-deb.sh: --maintainer must be one line without | & or \\" >&2; exit 64 ;;
    *" <"*@*">") ;;
    *) echo "build-deb.sh: --maintainer must read \"NAME <ADDRESS>\"" >&2; exit 64 ;;
esac
for b in keyholed keyhole; do
    [ -x "$bin/$b" ] || { echo "build-deb.sh: $bin/$b is missing: build first" >&2; exit 1; }
done
if [ -z "$version" ]; then
    version=$(sed -n 's/.*static let current = "\(.*\)".*/\1/p' "$top/Sources/KeyholeProtocol/KeyholeVersion.swift")-1
fi

root=$(mktemp -d "${TMPDIR:-/tmp}/keyhole-deb.XXXXXX")
trap 'rm -rf "$root"' EXIT
install -d -m 0755 "$root/DEBIAN" "$root/usr/bin" "$root/usr/lib/systemd/system" "$root/usr/lib/sysusers.d" \
    "$root/usr/lib/tmpfiles.d" "$root/etc/keyhole" "$root/usr/share/doc/keyhole"
for b in keyholed keyhole; do
    install -m 0755 "$bin/$b" "$root/usr/bin/$b"
    [ "$strip" = no ] || strip --strip-unneeded --remove-section=.comment --remove-section=.note "$root/usr/bin/$b"
done
install -m 0644 "$packaging/systemd/keyholed.service" "$packaging/systemd/keyholed.socket" "$packaging/systemd/keyholed-http.socket" \
    "$root/usr/lib/systemd/system/"
install -m 0644 "$packaging/systemd/keyhole.sysusers" "$root/usr/lib/sysusers.d/keyhole.conf"
install -m 0644 "$packaging/systemd/keyhole.tmpfiles" "$root/usr/lib/tmpfiles.d/keyhole.conf"
install -m 0644 "$packaging/keyholed.toml" "$root/etc/keyhole/keyholed.toml"
install -d -m 0700 "$root/etc/keyhole/credentials"
for page in "$packaging"/man/man*/*; do
    [ -f "$page" ] || { echo "build-deb.sh: no man pages under $packaging/man" >&2; exit 1; }
    section=$(basename "$(dirname "$page")")
    install -d -m 0755 "$root/usr/share/man/$section"
    gzip -9nc "$page" > "$root/usr/share/man/$section/$(basename "$page").gz"
    chmod 0644 "$root/usr/share/man/$section/$(basename "$page").gz"
done
gzip -9nc "$top/README.md" > "$root/usr/share/doc/keyhole/README.md.gz"
install -m 0644 "$here/copyright" "$root/usr/share/doc/keyhole/copyright"
# Debian's changelog for a package built outside Debian's tools: one entry, dated by the last commit
# (or SOURCE_DATE_EPOCH), so that the same sources give the same package.
when=${SOURCE_DATE_EPOCH:-$(git -C "$top" log -1 --format=%ct 2>/dev/null || date +%s)}
printf 'keyhole (%s) unstable; urgency=medium\n\n  * Built from the project'"'"'s sources; their history is in its repository.\n\n -- %s  %s\n' \
    "$version" "$maintainer" "$(LC_ALL=C date -u -R -d "@$when")" | gzip -9n > "$root/usr/share/doc/keyhole/changelog.Debian.gz"
chmod 0644 "$root/usr/share/doc/keyhole/"*
install -d -m 0755 "$root/usr/share/lintian/overrides"
{
    cat "$here/lintian-overrides"
    if [ "$maintainer" = "$placeholder" ]; then
        printf '# No --maintainer given: the placeholder address, which no mail reaches, stays.\n'
        printf 'keyhole: bogus-mail-host Maintainer keyhole@localhost\n'
        printf 'keyhole: bogus-mail-host-in-debian-changelog keyhole@localhost (for version %s) [usr/share/doc/keyhole/changelog.Debian.gz:1]\n' "$version"
    fi
} > "$root/usr/share/lintian/overrides/keyhole"
chmod 0644 "$root/usr/share/lintian/overrides/keyhole"
# The drop-in for PostgreSQL on the same host (README, "Several hosts"): an example, not installed.
install -d -m 0755 "$root/usr/share/doc/keyhole/examples"
install -m 0644 "$packaging/systemd/keyholed-postgres.conf" "$root/usr/share/doc/keyhole/examples/keyholed-postgres.conf"

# Depends: the owner of every shared library the binaries name (DT_NEEDED), as dpkg-shlibdeps would.
depends=""
needed=$(for b in keyholed keyhole; do readelf -d "$root/usr/bin/$b" | sed -n 's/.*Shared library: \[\(.*\)\].*/\1/p'; done | sort -u)
for name in $needed; do
    library=$(ldconfig -p | awk -v name="$name" '$1 == name { print $NF; exit }')
    owner=""
    if [ -n "$library" ]; then
        owner=$(dpkg -S "$library" 2>/dev/null || dpkg -S "$(readlink -f "$library")" 2>/dev/null || true)
        owner=$(printf '%s\n' "$owner" | head -n1 | cut -d: -f1)
    fi
    if [ -z "$owner" ]; then
        [ "$allow" = yes ] || { echo "build-deb.sh: no Debian package provides $name (build with --static-swift-stdlib)" >&2; exit 1; }
        continue
    fi
    case " $depends " in *" $owner "*) ;; *) depends="$depends $owner" ;; esac
done
# init-system-helpers is essential, so named with a version (deb-systemd-helper and deb-systemd-invoke
# as the scripts use them, as debhelper's dh_installsystemd asks for).
depends="$(printf '%s\n' $depends systemd | sort -u | paste -sd, - | sed 's/,/, /g'), init-system-helpers (>= 1.54~)"

size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
sed -e "s/@VERSION@/$version/" -e "s/@ARCH@/$(dpkg --print-architecture)/" -e "s/@DEPENDS@/$depends/" -e "s/@SIZE@/$size/" \
    -e "s|@MAINTAINER@|$maintainer|" "$here/control.in" > "$root/DEBIAN/control"
install -m 0644 "$here/conffiles" "$root/DEBIAN/conffiles"
for script in postinst prerm postrm; do install -m 0755 "$here/$script" "$root/DEBIAN/$script"; done
# What `dpkg --verify` checks the installed files against (conffiles are dpkg's own business).
(cd "$root" && find usr -type f -print0 | sort -z | xargs -0 md5sum) > "$root/DEBIAN/md5sums"
chmod 0644 "$root/DEBIAN/md5sums"

dpkg-deb --root-owner-group -Z"$compression" --build "$root" "$out" >/dev/null
echo "$out"
